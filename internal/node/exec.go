package node

import (
	"context"
	"fmt"

	"substrate.dev/ate/internal/sandbox"
)

// execEntry is one running exec, ended by end.
type execEntry struct{ end context.CancelCauseFunc }

// Exec runs req.Process in the running container of req.ActorUID and
// returns its exit code (sandbox.Execer.Exec). Errors wrap ErrStale when
// the worker does not host that actor (or is draining it for a
// checkpoint), ErrExecEnded when a checkpoint or stop of the actor ended
// the process, sandbox.ErrExecStart when it could not start, and
// ErrExecUnsupported for a sandbox class without exec.
//
// The process takes no slot lock: checkpoints and stops run beside it and
// end it first (endExecs). While it runs it counts as a request in flight
// for the actor's idleness (gate.enterExec).
func (n *Node) Exec(ctx context.Context, req ExecRequest) (int, error) {
	ex, ok := n.cfg.Runtime.(sandbox.Execer)
	if !ok {
		return 0, ErrExecUnsupported
	}
	s, err := n.slot(req.Worker)
	if err != nil {
		return 0, err
	}
	id, release, ok := s.gate.enterExec(req.ActorUID)
	if !ok {
		return 0, fmt.Errorf("exec in %s on %s: %w", req.ActorUID, req.Worker, ErrStale)
	}
	defer release()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	e := &execEntry{end: cancel}
	if !s.addExec(id, e) {
		return 0, fmt.Errorf("exec in %s on %s: %w", req.ActorUID, req.Worker, ErrStale)
	}
	defer s.removeExec(e)
	code, err := ex.Exec(ctx, s.sb, id, req.Process)
	if err != nil {
		return 0, fmt.Errorf("exec in %s on %s: %w", req.ActorUID, req.Worker, err)
	}
	return code, nil
}

// endExecs ends every exec in s and waits for them to return; none can
// start until the slot's next container. Checkpoint and clearOp call it
// before they touch the container. s.opMu must be held.
func (n *Node) endExecs(s *slot) {
	s.mu.Lock()
	s.execsClosed = true
	for e := range s.execs {
		e.end(ErrExecEnded)
	}
	s.mu.Unlock()
	s.execWG.Wait()
}

// addExec registers e on container id; false when s no longer runs id or
// its execs were ended.
func (s *slot) addExec(id string, e *execEntry) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.containerID != id || s.stopping || s.execsClosed {
		return false
	}
	if s.execs == nil {
		s.execs = map[*execEntry]struct{}{}
	}
	s.execs[e] = struct{}{}
	s.execWG.Add(1)
	return true
}

func (s *slot) removeExec(e *execEntry) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.execs[e]; ok {
		delete(s.execs, e)
		s.execWG.Done()
	}
}
