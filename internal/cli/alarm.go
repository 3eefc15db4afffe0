package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// newAlarmCommand is `ate alarm actor NAME --in D | --at T --path P`.
func newAlarmCommand(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "alarm KIND NAME",
		Short: "Set an alarm: wake an actor at a time and POST to a path of it",
		Long: `Set an alarm: at the given time (--at, RFC 3339) or after the given delay
(--in, like 90s, 10m, 2h) the actor is resumed, if it is not running, and
sent POST <path> with header Ate-Alarm-Id: <id> and Ate-Alarm-Time: <the
time set>. Delivery is at least once: de-duplicate by the id. A delivery
that fails (the resume fails, the actor answers 5xx or cannot be reached)
is retried with backoff for 10 minutes, then the alarm is kept as FAILED
with the reason (ate get alarms). The path starts with '/' and is at most
1024 bytes; the time lies within a year; an actor has at most 16 pending
alarms. An actor can set its own alarms from inside its sandbox too:
POST http://169.254.17.1/v1/alarms {"in": "10m", "path": "/tick"}
(docs/alarms.md).`,
		Example: `  ate alarm actor counter-1 --in 10m --path /tick
  ate alarm actor team/agent --at 2026-12-24T18:00:00Z --path /remind?what=gifts
  ate get alarms --actor counter-1
  ate delete alarm ID`,
	}
	var in time.Duration
	var at, path string
	actor := &cobra.Command{
		Use: "actor NAME | ATESPACE/NAME", Short: "Set an alarm for an actor",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return a.setAlarm(cmd, args[0], in, at, path) },
	}
	actor.Flags().DurationVar(&in, "in", 0, "fire after this delay from now (like 90s, 10m, 2h)")
	actor.Flags().StringVar(&at, "at", "", "fire at this time, RFC 3339 (like 2026-12-24T18:00:00Z)")
	actor.Flags().StringVar(&path, "path", "", "request path the alarm POSTs to, starting with '/' (required)")
	actor.MarkFlagsMutuallyExclusive("in", "at")
	actor.MarkFlagsOneRequired("in", "at")
	_ = actor.MarkFlagRequired("path")
	kindGroup(cmd, actor)
	return cmd
}

func (a *app) setAlarm(cmd *cobra.Command, arg string, in time.Duration, at, path string) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	req := &atev1.SetAlarmRequest{Atespace: key.Atespace, Actor: key.Name, Path: path}
	switch {
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return fmt.Errorf("--at %q is not an RFC 3339 time (like 2026-12-24T18:00:00Z)", at)
		}
		req.Time = timestamppb.New(t)
	case in <= 0:
		return fmt.Errorf("--in must be positive, got %s", in)
	case in < time.Millisecond:
		return fmt.Errorf("--in %s is below a millisecond", in)
	default:
		req.DelayMs = in.Milliseconds()
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	al, err := call(cmd.Context(), s, s.client.SetAlarm, req)
	if err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), a.output, al, alarmTable(a.now()),
		fmt.Sprintf("alarm %s set for %s at %s (POST %s)", al.GetId(), key, al.GetTime().AsTime().Local().Format(time.RFC3339), al.GetPath()))
}

// getAlarms is `ate get alarms [--actor NAME]`: the alarms of the
// atespace (-n), or of one actor.
func (a *app) getAlarms(cmd *cobra.Command, actor string) error {
	atespace, actor, err := a.actorFilter(actor)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	resp, err := call(cmd.Context(), s, s.client.ListAlarms, &atev1.ListAlarmsRequest{Atespace: atespace, Actor: actor})
	if err != nil {
		return err
	}
	if len(resp.GetAlarms()) == 0 && a.output == formatTable {
		fmt.Fprintf(cmd.ErrOrStderr(), "No alarms found in atespace %s.\n", atespace)
		return nil
	}
	return printObjects(cmd.OutOrStdout(), a.output, resp.GetAlarms(), false, alarmTable(a.now()))
}

func (a *app) deleteAlarm(cmd *cobra.Command, id string) error {
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := call(cmd.Context(), s, s.client.CancelAlarm, &atev1.CancelAlarmRequest{Id: id}); err != nil {
		return err
	}
	_, err = fmt.Fprintf(cmd.OutOrStdout(), "alarm %s deleted\n", id)
	return err
}

func alarmTable(now time.Time) table[*atev1.Alarm] {
	return table[*atev1.Alarm]{
		header: []string{"ID", "ACTOR", "PATH", "TIME", "STATE", "ATTEMPTS", "MESSAGE"},
		row: func(x *atev1.Alarm) []string {
			when := x.GetTime().AsTime().Local().Format(time.RFC3339)
			if d := x.GetTime().AsTime().Sub(now); d > 0 {
				when += " (in " + d.Round(time.Second).String() + ")"
			}
			return []string{x.GetId(), x.GetAtespace() + "/" + x.GetActor(), x.GetPath(), when,
				x.GetState().String(), fmt.Sprint(x.GetAttempts()), x.GetMessage()}
		},
	}
}
