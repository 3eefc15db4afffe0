package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

// testNodeDrains: put (a second put keeps the first drain), list in
// node order with every field kept, delete (twice is fine).
func testNodeDrains(t *testing.T, s store.Store) {
	ctx := context.Background()
	list, err := s.ListNodeDrains(ctx)
	must(t, err)
	if len(list) != 0 {
		t.Fatalf("empty store lists %d node drains", len(list))
	}
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	b := &store.NodeDrain{Node: "node-b", Reason: "pod terminating", CreateTime: at}
	a := &store.NodeDrain{Node: "node-a", Reason: "maintenance", CreateTime: at}
	must(t, s.PutNodeDrain(ctx, b))
	must(t, s.PutNodeDrain(ctx, a))
	must(t, s.PutNodeDrain(ctx, &store.NodeDrain{Node: "node-b", Reason: "again", CreateTime: at.Add(time.Hour)}))
	list, err = s.ListNodeDrains(ctx)
	must(t, err)
	if want := []*store.NodeDrain{a, b}; !reflect.DeepEqual(list, want) {
		t.Errorf("ListNodeDrains = %+v, want %+v", list, want)
	}
	must(t, s.DeleteNodeDrain(ctx, "node-a"))
	must(t, s.DeleteNodeDrain(ctx, "node-a"))
	list, err = s.ListNodeDrains(ctx)
	must(t, err)
	if len(list) != 1 || list[0].Node != "node-b" {
		t.Errorf("after delete ListNodeDrains = %+v, want node-b only", list)
	}
}
