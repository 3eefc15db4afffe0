package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// goldenPoll paces waitGolden: a build's phases take from milliseconds
// to minutes, and the status keeps them all, so this only sets how
// late a phase is shown.
const goldenPoll = 200 * time.Millisecond

// waitGolden polls template atespace/name until its golden build is
// READY (nil) or FAILED (an error with the build's message), printing
// the human text of each phase the build reports (its status's
// build_phases while BUILDING) to stderr with the time since the wait
// began. An API server older than build_phases shows no phases, only
// the outcome.
func (a *app) waitGolden(cmd *cobra.Command, s *session, atespace, name string) error {
	out := cmd.ErrOrStderr()
	begin := a.now()
	printed := 0
	tick := time.NewTicker(min(a.pollInterval, goldenPoll))
	defer tick.Stop()
	for {
		t, err := call(cmd.Context(), s, s.client.GetActorTemplate, &atev1.GetActorTemplateRequest{Atespace: atespace, Name: name})
		if err != nil {
			return err
		}
		elapsed := a.now().Sub(begin).Round(100 * time.Millisecond)
		st := t.GetStatus()
		phase := st.PhaseOrName()
		if phase != atev1.ActorTemplateStatus_FAILED {
			// READY keeps the build's phases: those a fast build ran
			// between two polls are shown before it.
			phases := st.GetBuildPhases()
			for _, p := range phases[min(printed, len(phases)):] {
				fmt.Fprintf(out, "  %s (%s)\n", p.Text(), elapsed)
			}
			printed = max(printed, len(phases))
		}
		switch phase {
		case atev1.ActorTemplateStatus_READY:
			fmt.Fprintf(out, "template %s/%s %s after %s\n", atespace, name, phase, elapsed)
			return nil
		case atev1.ActorTemplateStatus_FAILED:
			return fmt.Errorf("golden build of template %s/%s %s after %s: %s", atespace, name, phase, elapsed, st.GetMessage())
		}
		select {
		case <-cmd.Context().Done():
			return cmd.Context().Err()
		case <-tick.C:
		}
	}
}
