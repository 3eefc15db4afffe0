package apiserver

import (
	"context"
	"slices"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
)

// TestListExpiredActors: expired_only lists exactly what the sweep would
// delete (lifecycle.ExpiredFor), across pages.
func TestListExpiredActors(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	for name, ttl := range map[string]string{"ttl": "1h", "forever": ""} {
		spec := validSpec()
		if ttl != "" {
			spec.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: ttl}
		}
		must(st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: name, UID: name, Phase: store.TemplateReady, Spec: spec}))
	}
	old, recent := time.Now().Add(-2*time.Hour), time.Now()
	for _, a := range []struct {
		name, tpl string
		state     store.ActorState
		at        time.Time
	}{
		{"a-old", "ttl", store.Suspended, old},
		{"b-recent", "ttl", store.Suspended, recent},
		{"c-crashed", "ttl", store.Crashed, old},
		{"d-paused", "ttl", store.Paused, old},
		{"e-forever", "forever", store.Suspended, old},
		{"f-old", "ttl", store.Suspended, old},
	} {
		must(st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: a.name, UID: a.name, Template: a.tpl,
			Lifecycle: store.Lifecycle{State: a.state}, StateTime: a.at}))
	}
	s := New(st, nil, "gvisor", nil, nil)
	var got []string
	req := &atev1.ListActorsRequest{Atespace: "default", ExpiredOnly: true, PageSize: 2}
	for {
		resp, err := s.ListActors(ctx, req)
		must(err)
		for _, a := range resp.GetActors() {
			got = append(got, a.GetName())
		}
		if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
			break
		}
	}
	if want := []string{"a-old", "c-crashed", "f-old"}; !slices.Equal(got, want) {
		t.Fatalf("expired actors = %v, want %v", got, want)
	}
}
