package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

func newIngressToken(atespace, name, hash string) *store.IngressToken {
	return &store.IngressToken{Atespace: atespace, Name: name, UID: "uid-" + atespace + "-" + name, Hash: hash,
		CreateTime: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// testIngressTokens: create (checks), find by hash within the atespace
// only, list order and filter, delete; the atespace's deletion takes its
// tokens, so a re-created atespace does not inherit them.
func testIngressTokens(t *testing.T, s store.Store) {
	ctx := context.Background()
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns-1"}))
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "other", UID: "ns-2"}))

	must(t, s.CreateIngressToken(ctx, newIngressToken("default", "web", "h1")))
	must(t, s.CreateIngressToken(ctx, newIngressToken("default", "ci", "h2")))
	must(t, s.CreateIngressToken(ctx, newIngressToken("other", "web", "h3")))
	wantErr(t, s.CreateIngressToken(ctx, newIngressToken("default", "web", "h4")), store.ErrAlreadyExists)
	wantErr(t, s.CreateIngressToken(ctx, newIngressToken("nowhere", "web", "h5")), store.ErrNotFound)

	for _, tc := range []struct {
		atespace, hash string
		want           string // name, "" for ErrNotFound
	}{
		{"default", "h1", "web"},
		{"default", "h2", "ci"},
		{"other", "h3", "web"},
		{"other", "h1", ""},   // another atespace's token
		{"default", "h3", ""}, // likewise
		{"default", "h4", ""}, // refused as a duplicate, never stored
		{"default", "", ""},
		{"nowhere", "h1", ""},
	} {
		got, err := s.FindIngressToken(ctx, tc.atespace, tc.hash)
		if tc.want == "" {
			if err == nil {
				t.Errorf("FindIngressToken(%q, %q) = %+v, want ErrNotFound", tc.atespace, tc.hash, got)
			} else {
				wantErr(t, err, store.ErrNotFound)
			}
			continue
		}
		must(t, err)
		if want := newIngressToken(tc.atespace, tc.want, tc.hash); *got != *want {
			t.Errorf("FindIngressToken(%q, %q) = %+v, want %+v", tc.atespace, tc.hash, got, want)
		}
	}

	for _, tc := range []struct {
		atespace string
		want     []string
	}{
		{"", []string{"default/ci", "default/web", "other/web"}},
		{"default", []string{"default/ci", "default/web"}},
		{"empty", nil},
	} {
		list, err := s.ListIngressTokens(ctx, tc.atespace)
		must(t, err)
		var keys []string
		for _, tk := range list {
			keys = append(keys, tk.Atespace+"/"+tk.Name)
		}
		if !slices.Equal(keys, tc.want) {
			t.Errorf("ListIngressTokens(%q) = %v, want %v", tc.atespace, keys, tc.want)
		}
	}

	must(t, s.DeleteIngressToken(ctx, "default", "web"))
	wantErr(t, s.DeleteIngressToken(ctx, "default", "web"), store.ErrNotFound)
	_, err := s.FindIngressToken(ctx, "default", "h1")
	wantErr(t, err, store.ErrNotFound)

	// Tokens do not hold their atespace, and go with it.
	must(t, s.DeleteAtespace(ctx, "other"))
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "other", UID: "ns-3"}))
	_, err = s.FindIngressToken(ctx, "other", "h3")
	wantErr(t, err, store.ErrNotFound)
	list, err := s.ListIngressTokens(ctx, "")
	must(t, err)
	if len(list) != 1 || list[0].Name != "ci" {
		t.Errorf("after deleting atespace other: ListIngressTokens = %v, want default/ci only", list)
	}
}
