package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// Bounds of `ate logs` flags, as the server checks them.
const (
	maxLogTail  = 100000
	maxLogSince = 30 * 24 * time.Hour
)

// newLogsCommand is `ate logs actor NAME`.
func newLogsCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "logs KIND NAME",
		Short: "Show an actor's output (stdout and stderr) across its moves between workers and nodes",
		Example: `  ate logs actor counter-1
  ate logs actor counter-1 -f --tail 20
  ate logs actor team/notes-1 --since 10m`,
	}
	var follow, timestamps bool
	var since time.Duration
	var tail int32
	actor := &cobra.Command{
		Use: "actor NAME | ATESPACE/NAME", Aliases: []string{"actors"},
		Short: "Show the actor's output, with a line marking each resume and suspend; -f follows it",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.actorLogs(cmd, args[0], follow, timestamps, since, tail)
		},
	}
	f := actor.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until interrupted, across suspends and resumes")
	f.BoolVar(&timestamps, "timestamps", false, "prefix each line with the time it was collected (RFC 3339)")
	f.DurationVar(&since, "since", 0, "only lines written within this long before now (e.g. 10m)")
	f.Int32Var(&tail, "tail", 0, fmt.Sprintf("only the last N lines before following (0: all the nodes keep; at most %d)", maxLogTail))
	kindGroup(cmd, actor)
	return cmd
}

func (a *app) actorLogs(cmd *cobra.Command, arg string, follow, timestamps bool, since time.Duration, tail int32) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	switch {
	case since < 0 || since > maxLogSince:
		return fmt.Errorf("--since %s is out of range: give a positive duration up to %s", since, maxLogSince)
	case since > 0 && since < time.Second:
		return fmt.Errorf("--since %s is less than a second: give e.g. 30s or 10m", since)
	case tail < 0 || tail > maxLogTail:
		return fmt.Errorf("--tail %d is out of range: give 0 (all) to %d", tail, maxLogTail)
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	ctx := cmd.Context()
	if !follow {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	return streamLogs(ctx, s, &atev1.ActorLogsRequest{Atespace: key.Atespace, Name: key.Name, Follow: follow,
		SinceSeconds: int64(since / time.Second), Tail: tail}, cmd.OutOrStdout(), timestamps)
}

// streamLogs prints the lines the server streams for req until it ends
// the stream or ctx ends.
func streamLogs(ctx context.Context, s *session, req *atev1.ActorLogsRequest, w io.Writer, timestamps bool) error {
	stream, err := s.client.ActorLogs(ctx, req)
	if err != nil {
		return s.apiError(ctx, err)
	}
	for {
		l, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			if req.GetFollow() && errors.Is(ctx.Err(), context.Canceled) {
				return nil // interrupted
			}
			return s.apiError(ctx, err)
		}
		if timestamps {
			_, err = fmt.Fprintf(w, "%s %s\n", l.GetTime().AsTime().Format(time.RFC3339Nano), l.GetText())
		} else {
			_, err = fmt.Fprintln(w, l.GetText())
		}
		if err != nil {
			return err
		}
	}
}

// watchActor prints key's actor, then the actor as each of its state
// changes left it (the event's record), until ctx ends or the actor is
// deleted.
func (a *app) watchActor(ctx context.Context, s *session, key names.ActorKey, w io.Writer) error {
	// The cursor is taken before the read, so no change after the read
	// is missed; one between the two prints twice at worst, and is
	// skipped by version.
	last, err := call(ctx, s, s.client.ListEvents, &atev1.ListEventsRequest{Atespace: key.Atespace, Actor: key.Name, Limit: 1})
	if err != nil {
		return err
	}
	var after int64
	if es := last.GetEvents(); len(es) > 0 {
		after = es[len(es)-1].GetSeq()
	}
	act, err := call(ctx, s, s.client.GetActor, &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return err
	}
	p := newStreamPrinter(w, a.output, actorTable(a.now()))
	if err := p.print(act); err != nil {
		return err
	}
	version, uid := act.GetVersion(), act.GetUid()
	done := errors.New("deleted")
	err = a.watchEvents(ctx, s, &atev1.WatchEventsRequest{Atespace: key.Atespace, Actor: key.Name, AfterSeq: after}, func(e *atev1.Event) error {
		if e.GetActorUid() != uid {
			return nil // an earlier incarnation's late event, or a later one's
		}
		if e.GetToState() == "DELETED" {
			return done
		}
		r := e.GetActorRecord()
		if r == nil || r.GetVersion() <= version {
			return nil
		}
		version = r.GetVersion()
		return p.print(r)
	})
	if errors.Is(err, done) {
		_, err = fmt.Fprintf(w, "actor %s deleted\n", key)
	}
	return err
}
