package apiserver

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
)

// TestTagArgumentsAndCodes: bad fork and tag arguments are refused at the
// edge, and a tag holds its atespace and template with
// FAILED_PRECONDITION.
func TestTagArgumentsAndCodes(t *testing.T) {
	ctx := context.Background()
	st, must := openBolt(t)
	must(st.CreateAtespace(ctx, &store.Atespace{Name: "team"}))
	must(st.CreateTemplate(ctx, &store.Template{Atespace: "team", Name: "tpl", UID: "tpl", Phase: store.TemplateReady, Spec: validSpec()}))
	must(st.CreateTag(ctx, &store.Tag{Atespace: "team", Name: "v1", UID: "tag-1", Template: "tpl", Snapshot: "tag-1/x"}))
	s := New(st, nil, "gvisor", nil, nil)
	fork := func(name, tag, actor string) error {
		_, err := s.CreateActor(ctx, &atev1.CreateActorRequest{Actor: &atev1.Actor{Atespace: "team", Name: name}, FromTag: tag, FromActor: actor})
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		code codes.Code
		want string
	}{
		{"tag and actor", fork("f", "v1", "a"), codes.InvalidArgument, "not both"},
		{"bad tag name", fork("f", "V_1", ""), codes.InvalidArgument, "DNS-1123"},
		{"into itself", fork("a", "", "a"), codes.InvalidArgument, "into itself"},
		{"bad tag to take", func() error {
			_, err := s.TagActor(ctx, &atev1.TagActorRequest{Atespace: "team", Actor: "a", Tag: "-x"})
			return err
		}(), codes.InvalidArgument, "DNS-1123"},
		{"missing tag", func() error {
			_, err := s.GetTag(ctx, &atev1.GetTagRequest{Atespace: "team", Name: "v2"})
			return err
		}(), codes.NotFound, "v2"},
		{"atespace with a tag", func() error {
			_, err := s.DeleteAtespace(ctx, &atev1.DeleteAtespaceRequest{Name: "team"})
			return err
		}(), codes.FailedPrecondition, "holds tags"},
		{"template of a tag", func() error {
			_, err := s.DeleteActorTemplate(ctx, &atev1.DeleteActorTemplateRequest{Atespace: "team", Name: "tpl"})
			return err
		}(), codes.FailedPrecondition, "used by tag v1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if status.Code(tc.err) != tc.code || !strings.Contains(tc.err.Error(), tc.want) {
				t.Fatalf("got %v, want %s containing %q", tc.err, tc.code, tc.want)
			}
		})
	}
	list, err := s.ListTags(ctx, &atev1.ListTagsRequest{Atespace: "team"})
	must(err)
	if len(list.GetTags()) != 1 || list.GetTags()[0].GetName() != "v1" || list.GetTags()[0].GetTemplate() != "tpl" {
		t.Fatalf("ListTags = %v", list)
	}
}

// openBolt opens a bolt store in a temporary directory, closed at the
// test's end, and returns it with a must that fails the test on an error.
func openBolt(t *testing.T) (*bolt.Store, func(error)) {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
}
