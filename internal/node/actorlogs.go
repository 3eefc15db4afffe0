package node

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/actorlog"
)

// beginActorLog starts copying s's container output into req's actor log
// as run req.LogRun, after a marker line saying how it starts; a request
// with no LogRun (a golden build) keeps none. Failures cost only the
// actor's log, never the start. s.opMu must be held.
func (n *Node) beginActorLog(ctx context.Context, s *slot, req StartRequest, restore bool) {
	if req.LogRun == 0 || n.actorLogs == nil {
		return
	}
	how := "cold boot"
	if restore {
		how = "restore of snapshot " + req.Snapshot
	}
	text := fmt.Sprintf("--- ate: resumed on worker %s of node %s (%s)", s.name, n.cfg.Name, how)
	c, err := n.actorLogs.Begin(req.ActorUID, req.LogRun, s.name, n.workerLog(s), text)
	if err != nil {
		n.log.WarnContext(ctx, "begin actor log", "actor", req.Key(), "worker", s.name, "err", err)
		return
	}
	s.capture, s.stopWhy = c, ""
}

// endActorLog copies the rest of s's container output into its actor's
// log and ends the run with a marker line saying why (s.stopWhy, set by
// whoever stopped the container). The container must be gone. s.opMu
// must be held.
func (n *Node) endActorLog(ctx context.Context, s *slot) {
	if s.capture == nil {
		return
	}
	why := s.stopWhy
	if why == "" {
		why = "stopped"
	}
	if err := s.capture.Finish(fmt.Sprintf("--- ate: %s on worker %s of node %s", why, s.name, n.cfg.Name)); err != nil {
		n.log.WarnContext(ctx, "end actor log", "worker", s.name, "err", err)
	}
	s.capture, s.stopWhy = nil, ""
}

// ReadActorLogs returns the lines of the actor's log this node keeps
// after the cursor, in order, at most limit (0: all).
func (n *Node) ReadActorLogs(_ context.Context, actorUID string, after actorlog.Cursor, limit int) ([]actorlog.Line, error) {
	if n.actorLogs == nil {
		return nil, nil
	}
	return n.actorLogs.Read(actorUID, after, limit, n.cfg.Name)
}
