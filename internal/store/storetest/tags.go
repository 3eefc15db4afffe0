package storetest

import (
	"context"
	"slices"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

func newTag(atespace, name, uid string) *store.Tag {
	return &store.Tag{Atespace: atespace, Name: name, UID: uid, Actor: "a", ActorUID: "uid-a", Template: "tpl",
		Snapshot: uid + "/20300102T030405.000Z-0000000000000001", CreateTime: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
}

// testTags: create (checks), get, list order and filter, delete by uid;
// tags outlive their actor, hold their template and their atespace.
func testTags(t *testing.T, s store.Store) {
	ctx := context.Background()
	seed(t, s)
	a := newActor(t, s, "a", nil)
	must(t, s.CreateAtespace(ctx, &store.Atespace{Name: "other", UID: "ns-2"}))
	must(t, s.CreateTemplate(ctx, &store.Template{Atespace: "other", Name: "tpl", UID: "t-2", Phase: store.TemplateBuilding,
		Spec: seedSpec()}))

	must(t, s.CreateTag(ctx, newTag("default", "v2", "tag-2")))
	must(t, s.CreateTag(ctx, newTag("default", "v1", "tag-1")))
	must(t, s.CreateTag(ctx, newTag("other", "v1", "tag-3")))
	wantErr(t, s.CreateTag(ctx, newTag("default", "v1", "tag-4")), store.ErrAlreadyExists)
	noTpl := newTag("default", "x", "tag-5")
	noTpl.Template = "missing"
	wantErr(t, s.CreateTag(ctx, noTpl), store.ErrNotFound)
	wantErr(t, s.CreateTag(ctx, newTag("nowhere", "x", "tag-6")), store.ErrNotFound)

	got, err := s.GetTag(ctx, "default", "v1")
	must(t, err)
	if want := newTag("default", "v1", "tag-1"); *got != *want {
		t.Errorf("GetTag = %+v, want %+v", got, want)
	}
	_, err = s.GetTag(ctx, "default", "nope")
	wantErr(t, err, store.ErrNotFound)

	for _, tc := range []struct {
		atespace string
		want     []string
	}{
		{"", []string{"default/v1", "default/v2", "other/v1"}},
		{"default", []string{"default/v1", "default/v2"}},
		{"empty", nil},
	} {
		list, err := s.ListTags(ctx, tc.atespace)
		must(t, err)
		var keys []string
		for _, tg := range list {
			keys = append(keys, tg.Atespace+"/"+tg.Name)
		}
		if !slices.Equal(keys, tc.want) {
			t.Errorf("ListTags(%q) = %v, want %v", tc.atespace, keys, tc.want)
		}
	}

	// The tagged actor goes; its tag stays and holds the template.
	must(t, s.DeleteActor(ctx, a))
	wantErr(t, s.DeleteTemplate(ctx, "default", "tpl"), store.ErrNotEmpty)
	wantErr(t, s.DeleteAtespace(ctx, "other"), store.ErrNotEmpty)

	wantErr(t, s.DeleteTag(ctx, "default", "v1", "another-uid"), store.ErrConflict)
	must(t, s.DeleteTag(ctx, "default", "v1", "tag-1"))
	wantErr(t, s.DeleteTag(ctx, "default", "v1", "tag-1"), store.ErrNotFound)
	must(t, s.DeleteTag(ctx, "default", "v2", "tag-2"))
	must(t, s.DeleteTemplate(ctx, "default", "tpl"))
	must(t, s.DeleteTag(ctx, "other", "v1", "tag-3"))
	must(t, s.DeleteTemplate(ctx, "other", "tpl"))
	must(t, s.DeleteAtespace(ctx, "other"))
}
