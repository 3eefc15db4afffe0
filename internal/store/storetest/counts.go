package storetest

import (
	"context"
	"maps"
	"testing"

	"substrate.dev/ate/internal/store"
)

// testCountActors: the backend counts actors by state, and a state
// change moves one actor from one count to the other.
func testCountActors(t *testing.T, s store.Store) {
	ctx := context.Background()
	c, ok := s.(store.ActorCounter)
	if !ok {
		t.Fatalf("%T does not implement store.ActorCounter", s)
	}
	got, err := c.CountActors(ctx)
	must(t, err)
	if len(got) != 0 {
		t.Fatalf("empty store counts %v", got)
	}
	seed(t, s)
	a := newActor(t, s, "a", nil)
	newActor(t, s, "b", nil)
	cur, err := s.GetActor(ctx, a.Key())
	must(t, err)
	cur.State = store.Crashed
	_, err = s.UpdateActor(ctx, cur)
	must(t, err)
	got, err = c.CountActors(ctx)
	must(t, err)
	if want := map[store.ActorState]int{store.Suspended: 1, store.Crashed: 1}; !maps.Equal(got, want) {
		t.Fatalf("CountActors = %v, want %v", got, want)
	}
}
