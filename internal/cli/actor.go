package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// errWaitTimedOut is wrapped by the error `ate wait` returns when --timeout
// passes before the actor reaches the wanted state.
var errWaitTimedOut = errors.New("timed out")

// actorAction runs one state-changing RPC on an actor (suspend, resume) and
// reports the actor's new state.
func (a *app) actorAction(cmd *cobra.Command, arg, verb string, rpc func(context.Context, *session, names.ActorKey) (*atev1.Actor, error)) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	actor, err := rpc(cmd.Context(), s, key)
	if err != nil {
		return err
	}
	msg := fmt.Sprintf("actor %s %s (%s)", key, verb, actor.GetState())
	if w := actor.GetWorker(); w != "" {
		msg = fmt.Sprintf("actor %s %s (%s on worker %s)", key, verb, actor.GetState(), w)
	}
	return printResult(cmd.OutOrStdout(), a.output, actor, actorTable(a.now()), msg)
}

func newWaitCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "wait KIND NAME --for state=STATE",
		Short: "Wait until an actor reaches a state",
	}
	var cond string
	actor := &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME --for state=STATE",
		Short: "Poll an actor until it is in STATE or --timeout passes",
		Long: "Poll an actor until it is in STATE or --timeout passes; here --timeout\n" +
			"bounds the whole wait, not each call. An unreachable server is retried.\n" +
			"STATE is one of " + strings.Join(waitableStates(), ", ") + ".",
		Example: "  ate wait actor counter-1 --for state=RUNNING --timeout 60s",
		Args:    cobra.ExactArgs(1),
		RunE:    func(cmd *cobra.Command, args []string) error { return a.waitActor(cmd, args[0], cond) },
	}
	actor.Flags().StringVar(&cond, "for", "", "condition to wait for: state=STATE (required)")
	_ = actor.MarkFlagRequired("for") // cannot fail: the flag is defined above
	kindGroup(cmd, actor)
	return cmd
}

// waitableStates lists the state names --for accepts, in state-machine order.
func waitableStates() []string {
	var out []string
	for v := int32(1); ; v++ {
		name, ok := atev1.ActorState_name[v]
		if !ok {
			return out
		}
		out = append(out, name)
	}
}

// parseWaitFor parses --for: "state=RUNNING" (the state is case-insensitive).
func parseWaitFor(cond string) (atev1.ActorState, error) {
	key, val, ok := strings.Cut(cond, "=")
	state := strings.ToUpper(strings.TrimSpace(val))
	if !ok || strings.TrimSpace(key) != "state" || !slices.Contains(waitableStates(), state) {
		return 0, fmt.Errorf("--for %q: want state=STATE with STATE one of %s", cond, strings.Join(waitableStates(), ", "))
	}
	return atev1.ActorState(atev1.ActorState_value[state]), nil
}

func (a *app) waitActor(cmd *cobra.Command, arg, cond string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	want, err := parseWaitFor(cond)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(cmd.Context(), a.timeout)
	defer cancel()
	actor, err := pollActor(ctx, s, key, want, a.pollInterval)
	if errors.Is(err, errWaitTimedOut) {
		return fmt.Errorf("%w after %s waiting for actor %s to be %s%s", err, a.timeout, key, want, lastSeen(actor))
	}
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), a.output, actor, actorTable(a.now()), fmt.Sprintf("actor %s is %s", key, want))
}

// pollActor calls GetActor every interval until the actor is in want or ctx
// ends. On timeout it returns errWaitTimedOut together with the last actor
// seen (possibly nil), so the caller can say where it got stuck. An
// unreachable server is retried until the deadline: the point of waiting is
// to ride out restarts. Any other error ends the wait.
func pollActor(ctx context.Context, s *session, key names.ActorKey, want atev1.ActorState, interval time.Duration) (*atev1.Actor, error) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	req := &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name}
	var last *atev1.Actor
	for {
		actor, err := call(ctx, s, s.client.GetActor, req)
		switch {
		case err == nil:
			if actor.GetState() == want {
				return actor, nil
			}
			last = actor
		case ctx.Err() != nil, status.Code(err) == codes.Unavailable, status.Code(err) == codes.DeadlineExceeded:
			// The deadline hit mid-call (the server may say so before our
			// own timer fires), or the server is away: retry unless ctx is
			// done.
		default:
			return nil, err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return last, errWaitTimedOut
			}
			return nil, fmt.Errorf("wait for actor %s: %w", key, ctx.Err())
		case <-ticker.C:
		}
	}
}

// lastSeen describes the actor's last observed state for a timeout message.
func lastSeen(actor *atev1.Actor) string {
	if actor == nil {
		return ""
	}
	s := fmt.Sprintf("; it is %s", actor.GetState())
	if m := actor.GetMessage(); m != "" {
		s += ": " + m
	}
	return s
}
