package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

// testRoleBindings: create (name unique), list in name order with every
// field kept, delete (NotFound when gone).
func testRoleBindings(t *testing.T, s store.Store) {
	ctx := context.Background()
	list, err := s.ListRoleBindings(ctx)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("empty store lists %d role bindings", len(list))
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b := &store.RoleBinding{Name: "web-editors", Atespace: "web", Role: "editor", Users: []string{"alice", "system:serviceaccount:ns:sa"},
		Groups: []string{"devs"}, UID: "rb-1", CreateTime: at}
	a := &store.RoleBinding{Name: "all-admins", Atespace: "*", Role: "admin", Groups: []string{"ops"}, UID: "rb-2", CreateTime: at}
	must(t, s.CreateRoleBinding(ctx, b))
	must(t, s.CreateRoleBinding(ctx, a))
	wantErr(t, s.CreateRoleBinding(ctx, &store.RoleBinding{Name: "web-editors", Role: "viewer", UID: "rb-3"}), store.ErrAlreadyExists)
	list, err = s.ListRoleBindings(ctx)
	must(t, err)
	if want := []*store.RoleBinding{a, b}; !reflect.DeepEqual(list, want) {
		t.Errorf("ListRoleBindings = %+v, want %+v", list, want)
	}
	must(t, s.DeleteRoleBinding(ctx, "all-admins"))
	wantErr(t, s.DeleteRoleBinding(ctx, "all-admins"), store.ErrNotFound)
	list, err = s.ListRoleBindings(ctx)
	must(t, err)
	if len(list) != 1 || list[0].Name != "web-editors" {
		t.Errorf("after delete ListRoleBindings = %+v, want web-editors only", list)
	}
}
