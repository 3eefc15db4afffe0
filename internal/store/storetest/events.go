package storetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
)

// eventSeqs lists the Seq of each event.
func eventSeqs(es []*store.Event) []int64 {
	out := make([]int64, len(es))
	for i, e := range es {
		out[i] = e.Seq
	}
	return out
}

// testEvents: append assigns increasing seqs, the record round-trips,
// filters (actor, atespace, after, limit, newest) and pruning by age and
// by count.
func testEvents(t *testing.T, s store.Store) {
	ctx := context.Background()
	base := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	var appended []*store.Event
	for i, who := range []string{"a", "b", "a", "a", "b"} {
		ns := "default"
		if i == 4 {
			ns = "other"
		}
		e := &store.Event{Time: base.Add(time.Duration(i) * time.Minute), Type: store.EventNormal,
			Atespace: ns, Actor: who, ActorUID: "uid-" + who, From: store.Suspended, To: store.Resuming,
			Worker: "w1", Message: fmt.Sprintf("event %d", i),
			Record: &store.Actor{Atespace: ns, Name: who, UID: "uid-" + who, Lifecycle: store.Lifecycle{State: store.Resuming, Worker: "w1"}, Version: int64(i)}}
		if i == 3 {
			e.Type, e.To, e.Record = store.EventWarning, store.Crashed, nil
		}
		must(t, s.AppendEvent(ctx, e))
		if len(appended) > 0 && e.Seq <= appended[len(appended)-1].Seq {
			t.Fatalf("event %d got seq %d after %d", i, e.Seq, appended[len(appended)-1].Seq)
		}
		appended = append(appended, e)
	}
	seq := eventSeqs(appended)

	all, err := s.ListEvents(ctx, store.EventFilter{})
	must(t, err)
	if fmt.Sprint(eventSeqs(all)) != fmt.Sprint(seq) {
		t.Fatalf("ListEvents() = %v, want %v", eventSeqs(all), seq)
	}
	got := all[0]
	if !got.Time.Equal(base) || got.Message != "event 0" || got.To != store.Resuming || got.From != store.Suspended ||
		got.Record == nil || got.Record.Worker != "w1" || got.Record.State != store.Resuming || got.Worker != "w1" {
		t.Fatalf("event round trip: %+v (record %+v)", got, got.Record)
	}
	if all[3].Record != nil || all[3].Type != store.EventWarning {
		t.Fatalf("event 3: %+v", all[3])
	}

	for _, tc := range []struct {
		name string
		f    store.EventFilter
		want []int64
	}{
		{"actor", store.EventFilter{Atespace: "default", Actor: "a"}, []int64{seq[0], seq[2], seq[3]}},
		{"atespace", store.EventFilter{Atespace: "other"}, []int64{seq[4]}},
		{"after", store.EventFilter{After: seq[2]}, []int64{seq[3], seq[4]}},
		{"after actor", store.EventFilter{Atespace: "default", Actor: "a", After: seq[2]}, []int64{seq[3]}},
		{"limit", store.EventFilter{Limit: 2}, []int64{seq[0], seq[1]}},
		{"newest", store.EventFilter{Limit: 2, Newest: true}, []int64{seq[3], seq[4]}},
		{"newest actor", store.EventFilter{Atespace: "default", Actor: "a", Limit: 2, Newest: true}, []int64{seq[2], seq[3]}},
		{"none", store.EventFilter{Atespace: "default", Actor: "nobody"}, []int64{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := s.ListEvents(ctx, tc.f)
			must(t, err)
			if fmt.Sprint(eventSeqs(got)) != fmt.Sprint(tc.want) {
				t.Errorf("ListEvents(%+v) = %v, want %v", tc.f, eventSeqs(got), tc.want)
			}
		})
	}

	// By age: events 0 and 1 are older than base+90s.
	n, err := s.PruneEvents(ctx, base.Add(90*time.Second), 100)
	must(t, err)
	if n != 2 {
		t.Fatalf("PruneEvents by age deleted %d, want 2", n)
	}
	// By count: keep the newest 2 of the 3 left.
	n, err = s.PruneEvents(ctx, base, 2)
	must(t, err)
	if n != 1 {
		t.Fatalf("PruneEvents by count deleted %d, want 1", n)
	}
	left, err := s.ListEvents(ctx, store.EventFilter{})
	must(t, err)
	if fmt.Sprint(eventSeqs(left)) != fmt.Sprint(seq[3:]) {
		t.Fatalf("after pruning: %v, want %v", eventSeqs(left), seq[3:])
	}
	// A new event continues after the pruned ones.
	e := &store.Event{Time: base, Atespace: "default", Actor: "a", To: store.Running}
	must(t, s.AppendEvent(ctx, e))
	if e.Seq <= seq[4] {
		t.Fatalf("seq after pruning %d, want > %d", e.Seq, seq[4])
	}
}

// testEventsConcurrent: concurrent appends get distinct seqs, and a
// reader following by seq sees every one exactly once.
func testEventsConcurrent(t *testing.T, s store.Store) {
	ctx := context.Background()
	const writers, each = 4, 10
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				must(t, s.AppendEvent(ctx, &store.Event{Time: time.Now().UTC(), Atespace: "default",
					Actor: fmt.Sprintf("w%d", w), To: store.Running, Message: fmt.Sprint(i)}))
			}
		})
	}
	seen := map[int64]bool{}
	var after int64
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		es, err := s.ListEvents(ctx, store.EventFilter{After: after})
		must(t, err)
		for _, e := range es {
			if seen[e.Seq] {
				t.Fatalf("seq %d seen twice", e.Seq)
			}
			seen[e.Seq] = true
			after = e.Seq
		}
	}
	if len(seen) != writers*each {
		t.Fatalf("follower saw %d events, want %d", len(seen), writers*each)
	}
}

// testEventsBatch: AppendEvents stores a batch in slice order with
// increasing seqs after the events before it; an empty batch is a no-op.
func testEventsBatch(t *testing.T, s store.Store) {
	ctx := context.Background()
	first := &store.Event{Time: time.Now().UTC(), Atespace: "default", Actor: "a", To: store.Resuming}
	must(t, s.AppendEvent(ctx, first))
	must(t, s.AppendEvents(ctx, nil))
	var batch []*store.Event
	for i, to := range []store.ActorState{store.Running, store.Suspending, store.Suspended} {
		batch = append(batch, &store.Event{Time: time.Now().UTC(), Atespace: "default", Actor: fmt.Sprintf("b%d", i), To: to})
	}
	must(t, s.AppendEvents(ctx, batch))
	prev := first.Seq
	for i, e := range batch {
		if e.Seq <= prev {
			t.Fatalf("batch event %d got seq %d, want > %d", i, e.Seq, prev)
		}
		prev = e.Seq
	}
	got, err := s.ListEvents(ctx, store.EventFilter{After: first.Seq})
	must(t, err)
	if len(got) != len(batch) {
		t.Fatalf("listed %d events after the first, want %d", len(got), len(batch))
	}
	for i, e := range got {
		if e.Seq != batch[i].Seq || e.Actor != batch[i].Actor || e.To != batch[i].To {
			t.Fatalf("event %d listed as seq %d %s→%s, want seq %d %s→%s", i, e.Seq, e.Actor, e.To, batch[i].Seq, batch[i].Actor, batch[i].To)
		}
	}
}
