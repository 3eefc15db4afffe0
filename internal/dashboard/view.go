package dashboard

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// view is what the page template renders: each section's rows, or the
// error that kept it from loading (shown in place of the rows).
type view struct {
	Now             time.Time
	RefreshMs       int64
	Actors          []actorRow
	ActorsErr       string
	ActorsTruncated bool
	Templates       []*atev1.ActorTemplate
	TemplatesErr    string
	Workers         []*atev1.Worker
	WorkersErr      string
	Nodes           []*atev1.Node
	NodesErr        string
	Charts          []chart
	// ChartsNote says why there is no chart (no metrics) or that it
	// failed.
	ChartsNote string
	Events     []Event
	EventsErr  string
	// unauthenticated: the API refused the caller's token.
	unauthenticated bool
}

// actorRow is an actor and which of its buttons apply in its state.
type actorRow struct {
	*atev1.Actor
	Key                   string // "<atespace>/<name>"
	State                 string
	LastActivity          time.Time
	CanSuspend, CanResume bool
}

// load reads everything a page shows. A failed read fills its section's
// error; the rest still renders.
func (h *Handler) load(ctx context.Context) view {
	now := h.cfg.Now()
	v := view{Now: now, RefreshMs: RefreshInterval.Milliseconds()}
	actors, truncated, err := h.listActors(ctx)
	v.ActorsErr, v.ActorsTruncated = errText("actors", err), truncated
	if status.Code(err) == codes.Unauthenticated {
		v.unauthenticated = true
		return v
	}
	for _, a := range actors {
		v.Actors = append(v.Actors, newActorRow(a))
	}
	if ts, err := h.cfg.Control.ListActorTemplates(ctx, &atev1.ListActorTemplatesRequest{}); err != nil {
		v.TemplatesErr = errText("templates", err)
	} else {
		v.Templates = ts.GetTemplates()
	}
	if ws, err := h.cfg.Control.ListWorkers(ctx, &atev1.ListWorkersRequest{}); err != nil {
		v.WorkersErr = errText("workers", err)
	} else {
		v.Workers = ws.GetWorkers()
		slices.SortFunc(v.Workers, func(a, b *atev1.Worker) int {
			return strings.Compare(a.GetNode()+"/"+a.GetName(), b.GetNode()+"/"+b.GetName())
		})
	}
	if ns, err := h.cfg.Control.ListNodes(ctx, &atev1.ListNodesRequest{}); err != nil {
		v.NodesErr = errText("nodes", err)
	} else {
		v.Nodes = ns.GetNodes()
	}
	v.Charts, v.ChartsNote = h.charts(now)
	if evs, err := h.cfg.Events.RecentEvents(ctx, EventLimit); err != nil {
		v.EventsErr = errText("events", err)
	} else {
		v.Events = evs
	}
	return v
}

// listActors follows ListActors' pages (all atespaces) up to MaxActors;
// truncated says more exist.
func (h *Handler) listActors(ctx context.Context) (actors []*atev1.Actor, truncated bool, err error) {
	token := ""
	for {
		resp, err := h.cfg.Control.ListActors(ctx, &atev1.ListActorsRequest{PageSize: 100, PageToken: token})
		if err != nil {
			return actors, false, err
		}
		actors = append(actors, resp.GetActors()...)
		token = resp.GetNextPageToken()
		if token == "" {
			return actors, false, nil
		}
		if len(actors) >= MaxActors {
			return actors[:MaxActors], true, nil
		}
	}
}

func newActorRow(a *atev1.Actor) actorRow {
	r := actorRow{Actor: a, Key: a.GetAtespace() + "/" + a.GetName(), State: a.GetState().String()}
	r.LastActivity = tsTime(a.GetLastActivity())
	switch a.GetState() {
	case atev1.ActorState_RUNNING, atev1.ActorState_PAUSED:
		r.CanSuspend = true
	}
	switch a.GetState() {
	case atev1.ActorState_SUSPENDED, atev1.ActorState_PAUSED, atev1.ActorState_CRASHED:
		r.CanResume = true
	}
	return r
}

// charts lays out the latency history, or says why there is none.
func (h *Handler) charts(now time.Time) ([]chart, string) {
	lh := h.cfg.Latency
	if !lh.Enabled() {
		return nil, "No metrics are recorded by this process (ate up --metrics-addr or --http-addr turns them on)."
	}
	series, err := lh.Points(now)
	if err != nil {
		return nil, err.Error()
	}
	// The x axis covers the history there is, at least minChartSpan (so a
	// young process's points are not squeezed into the right edge) and
	// at most the ring's span.
	oldest := now
	for _, sp := range series {
		if len(sp.Points) > 0 && sp.Points[0].T.Before(oldest) {
			oldest = sp.Points[0].T
		}
	}
	span := min(max(now.Sub(oldest), minChartSpan), lh.Span())
	out := make([]chart, 0, len(series))
	for _, sp := range series {
		out = append(out, newChart(sp, now, span, lh.Window()))
	}
	return out, ""
}

// minChartSpan is the narrowest time axis of the latency chart.
const minChartSpan = 5 * time.Minute

// errText is a section's error line: the Control API's message, which
// says what to do, without the transport's wrapping.
func errText(what string, err error) string {
	if err == nil {
		return ""
	}
	st := status.Convert(err)
	return fmt.Sprintf("Could not list %s: %s (%s)", what, st.Message(), st.Code())
}

// stateClass is the CSS class of an actor's state or a template's,
// worker's or node's phase: "ok", "bad", "idle", or "busy" for the rest
// (states and phases on their way to another).
func stateClass(state any) string {
	switch s := state.(type) {
	case atev1.ActorState:
		switch s {
		case atev1.ActorState_RUNNING:
			return "ok"
		case atev1.ActorState_CRASHED:
			return "bad"
		case atev1.ActorState_SUSPENDED, atev1.ActorState_PAUSED:
			return "idle"
		}
	case atev1.ActorTemplateStatus_Phase:
		switch s {
		case atev1.ActorTemplateStatus_READY:
			return "ok"
		case atev1.ActorTemplateStatus_FAILED:
			return "bad"
		}
	case atev1.Worker_Phase:
		if s == atev1.Worker_FREE {
			return "ok"
		}
	case atev1.Node_Phase:
		switch s {
		case atev1.Node_READY:
			return "ok"
		case atev1.Node_LOST:
			return "bad"
		}
	}
	return "busy"
}

// ago says how long before now t was, coarsely ("12s ago"); "never" for
// the zero time.
func ago(now, t time.Time) string {
	if t.IsZero() {
		return "never"
	}
	d := now.Sub(t)
	switch {
	case d < 0:
		return "just now"
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	default:
		return fmt.Sprintf("%dd ago", int(d.Hours()/24))
	}
}

// short abbreviates a digest or snapshot id for a table cell (the whole
// value is in the cell's title).
func short(s string) string {
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) > 16 {
		return s[:16] + "…"
	}
	return s
}

// tsTime is t as a time, the zero time for nil.
func tsTime(t *timestamppb.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.AsTime()
}
