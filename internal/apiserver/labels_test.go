package apiserver

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// TestCreateActorLabels: CreateActor keeps valid labels in the record and
// refuses Kubernetes-invalid ones with INVALID_ARGUMENT naming them.
func TestCreateActorLabels(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "tpl", Phase: store.TemplateReady, Spec: validSpec()}))
	s := New(st, nil, "gvisor", nil, nil)
	tooMany := map[string]string{}
	for i := range maxLabels + 1 {
		tooMany[fmt.Sprintf("k%d", i)] = "v"
	}
	atMost := maps.Clone(tooMany)
	delete(atMost, "k0")
	for i, tc := range []struct {
		name   string
		labels map[string]string
		want   string // substring of the INVALID_ARGUMENT message; "" for success
	}{
		{"none", nil, ""},
		{"plain", map[string]string{"tier": "web", "track": "stable"}, ""},
		{"prefixed key, empty value", map[string]string{"example.com/owner": ""}, ""},
		{"dots dashes underscores", map[string]string{"a_b.c-d": "x.y_z-1"}, ""},
		{"at the bound", atMost, ""},
		{"too many", tooMany, "65 labels, at most 64"},
		{"empty key", map[string]string{"": "v"}, `label key ""`},
		{"key with space", map[string]string{"bad key": "v"}, `label key "bad key"`},
		{"key name too long", map[string]string{strings.Repeat("k", 64): "v"}, "label key"},
		{"bad prefix", map[string]string{"Bad_Prefix/x": "v"}, `label key "Bad_Prefix/x"`},
		{"value with slash", map[string]string{"tier": "a/b"}, `label "tier" value "a/b"`},
		{"value too long", map[string]string{"tier": strings.Repeat("v", 64)}, `label "tier" value`},
		{"value ends with dash", map[string]string{"tier": "web-"}, `label "tier" value "web-"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("a-%d", i)
			got, err := s.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{
				Atespace: "default", Name: name, Template: "tpl", Labels: tc.labels}})
			if tc.want != "" {
				if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
					t.Fatalf("err = %v, want INVALID_ARGUMENT containing %q", err, tc.want)
				}
				if _, err := st.GetActor(ctx, names.ActorKey{Atespace: "default", Name: name}); err == nil {
					t.Fatalf("refused actor %s was created", name)
				}
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if !maps.Equal(got.GetLabels(), tc.labels) {
				t.Fatalf("created labels = %v, want %v", got.GetLabels(), tc.labels)
			}
			back, err := s.GetActor(ctx, &atev1.GetActorRequest{Atespace: "default", Name: name})
			if err != nil || !maps.Equal(back.GetLabels(), tc.labels) {
				t.Fatalf("stored labels = %v (%v), want %v", back.GetLabels(), err, tc.labels)
			}
		})
	}
}

// TestListActorsLabelSelector: label_selector filters on the server,
// across pages; a selector that does not parse is INVALID_ARGUMENT.
func TestListActorsLabelSelector(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "default"}))
	must(st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "tpl", Phase: store.TemplateReady, Spec: validSpec()}))
	for name, l := range map[string]map[string]string{
		"a-web":    {"tier": "web", "track": "stable"},
		"b-web":    {"tier": "web", "track": "canary"},
		"c-db":     {"tier": "db"},
		"d-none":   nil,
		"e-web":    {"tier": "web"},
		"f-legacy": {"legacy": ""},
	} {
		must(st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: name, UID: name, Template: "tpl",
			Lifecycle: store.Lifecycle{State: store.Suspended}, Labels: l}))
	}
	s := New(st, nil, "gvisor", nil, nil)
	for _, tc := range []struct {
		selector string
		want     []string
	}{
		{"", []string{"a-web", "b-web", "c-db", "d-none", "e-web", "f-legacy"}},
		{"tier=web", []string{"a-web", "b-web", "e-web"}},
		{"tier=web,track!=canary", []string{"a-web", "e-web"}},
		{"tier in (db,web),track", []string{"a-web", "b-web"}},
		{"!tier", []string{"d-none", "f-legacy"}},
		{"legacy", []string{"f-legacy"}},
		{"tier=cache", nil},
	} {
		t.Run(tc.selector, func(t *testing.T) {
			var got []string
			req := &atev1.ListActorsRequest{Atespace: "default", LabelSelector: tc.selector, PageSize: 2}
			for {
				resp, err := s.ListActors(ctx, req)
				if err != nil {
					t.Fatalf("list: %v", err)
				}
				for _, a := range resp.GetActors() {
					got = append(got, a.GetName())
				}
				if req.PageToken = resp.GetNextPageToken(); req.PageToken == "" {
					break
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("selector %q: %v, want %v", tc.selector, got, tc.want)
			}
		})
	}
	for _, bad := range []string{"=web", "tier in (web", "a b", "tier=web/x"} {
		_, err := s.ListActors(ctx, &atev1.ListActorsRequest{Atespace: "default", LabelSelector: bad})
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), "label_selector") {
			t.Errorf("selector %q: err = %v, want INVALID_ARGUMENT about label_selector", bad, err)
		}
	}
}
