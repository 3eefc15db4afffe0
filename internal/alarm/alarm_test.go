package alarm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/nodeapi"
	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/bolt"
	"substrate.dev/ate/internal/testwait"
	"substrate.dev/ate/internal/tunnelproto"
)

// newStore returns a bolt store holding atespace default, template tpl
// and the named actors (uid "uid-<name>").
func newStore(t *testing.T, actors ...string) store.Store {
	t.Helper()
	st, err := bolt.Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	ctx := context.Background()
	must(t, st.CreateAtespace(ctx, &store.Atespace{Name: "default", UID: "ns"}))
	must(t, st.CreateTemplate(ctx, &store.Template{Atespace: "default", Name: "tpl", UID: "t",
		Spec: &atev1.ActorTemplateSpec{Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}}}}))
	for _, n := range actors {
		must(t, st.CreateActor(ctx, &store.Actor{Atespace: "default", Name: n, UID: "uid-" + n, Template: "tpl",
			Lifecycle: store.Lifecycle{State: store.Suspended}}))
	}
	return st
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func key(name string) names.ActorKey { return names.ActorKey{Atespace: "default", Name: name} }

// recorder is a deliverFunc that records deliveries and answers with
// fail(attempt) (nil = delivered).
type recorder struct {
	mu   sync.Mutex
	got  []string // "<id> <attempt>"
	by   []string // the scheduler that delivered, per delivery
	fail func(a *store.Alarm, attempt int) error
	ch   chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 100)} }

func (r *recorder) as(name string) deliverFunc {
	return func(_ context.Context, a *store.Alarm, attempt int) error {
		r.mu.Lock()
		r.got = append(r.got, fmt.Sprintf("%s %d", a.ID, attempt))
		r.by = append(r.by, name)
		f := r.fail
		r.mu.Unlock()
		defer func() { r.ch <- struct{}{} }()
		if f != nil {
			return f(a, attempt)
		}
		return nil
	}
}

// wait waits for n deliveries, failing after a deadline.
func (r *recorder) wait(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for range n {
		select {
		case <-r.ch:
		case <-deadline:
			r.mu.Lock()
			defer r.mu.Unlock()
			t.Fatalf("waited 10s for %d deliveries, got %v", n, r.got)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.got...)
}

func run(t *testing.T, s *Scheduler) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFiresInOrder: alarms set out of order fire in due order, each once,
// and are deleted once delivered; the loop is woken by Set (its refresh
// period is an hour, so nothing else would wake it).
func TestFiresInOrder(t *testing.T) {
	st := newStore(t, "a", "b")
	s := New(st, nil, Config{Refresh: time.Hour}, nil)
	rec := newRecorder()
	s.deliver = rec.as("s")
	run(t, s)
	ctx := context.Background()
	now := time.Now()
	var ids []string
	for _, tc := range []struct {
		actor string
		in    time.Duration
	}{{"a", 300 * time.Millisecond}, {"b", 100 * time.Millisecond}, {"a", 200 * time.Millisecond}} {
		a, err := s.Set(ctx, key(tc.actor), now.Add(tc.in), "/tick")
		must(t, err)
		ids = append(ids, a.ID)
	}
	got := rec.wait(t, 3)
	want := []string{ids[1] + " 1", ids[2] + " 1", ids[0] + " 1"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("deliveries %v, want %v", got, want)
	}
	testwait.Until(t, "delivered alarms deleted", func() bool {
		list, err := st.ListAlarms(ctx, "", "")
		return err == nil && len(list) == 0
	})
}

// TestCancelBeforeDue: a cancelled alarm never fires.
func TestCancelBeforeDue(t *testing.T) {
	st := newStore(t, "a")
	s := New(st, nil, Config{Refresh: time.Hour}, nil)
	rec := newRecorder()
	s.deliver = rec.as("s")
	run(t, s)
	ctx := context.Background()
	gone, err := s.Set(ctx, key("a"), time.Now().Add(150*time.Millisecond), "/cancelled")
	must(t, err)
	kept, err := s.Set(ctx, key("a"), time.Now().Add(300*time.Millisecond), "/kept")
	must(t, err)
	must(t, s.Cancel(ctx, gone.ID))
	if err := s.Cancel(ctx, gone.ID); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("second Cancel = %v, want ErrNotFound", err)
	}
	got := rec.wait(t, 1)
	if fmt.Sprint(got) != fmt.Sprint([]string{kept.ID + " 1"}) {
		t.Fatalf("deliveries %v, want only %s", got, kept.ID)
	}
}

// TestOneReplicaDelivers: two schedulers over one store (replicas) both
// know a due alarm; it is delivered once, by the one whose lease claim
// won, and the other neither delivers it while the lease is held nor
// after it was deleted.
func TestOneReplicaDelivers(t *testing.T) {
	st := newStore(t, "a")
	rec := newRecorder()
	release := make(chan struct{})
	rec.fail = func(*store.Alarm, int) error { <-release; return nil }
	cfg := Config{Refresh: 50 * time.Millisecond}
	cfg.Holder = "replica-1"
	r1 := New(st, nil, cfg, nil)
	cfg.Holder = "replica-2"
	r2 := New(st, nil, cfg, nil)
	r1.deliver, r2.deliver = rec.as("replica-1"), rec.as("replica-2")
	a, err := r1.Set(context.Background(), key("a"), time.Now().Add(200*time.Millisecond), "/tick")
	must(t, err)
	run(t, r1)
	run(t, r2)
	// Both replicas refresh every 50 ms and see the alarm due; the
	// delivery in flight holds the lease for many refreshes.
	testwait.Until(t, "a delivery to start", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.got) > 0 })
	lease, err := st.AcquireLease(context.Background(), leaseKey(a.ID), "someone-else", time.Second)
	if !errors.Is(err, store.ErrLeaseHeld) {
		t.Fatalf("alarm's lease during delivery: %+v, %v; want it held", lease, err)
	}
	deadline := time.Now().Add(300 * time.Millisecond) // six refreshes of each
	for time.Now().Before(deadline) {
		rec.mu.Lock()
		n := len(rec.got)
		rec.mu.Unlock()
		if n > 1 {
			t.Fatalf("delivered twice while one delivery held the lease: %v by %v", rec.got, rec.by)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	rec.wait(t, 1)
	testwait.Until(t, "the alarm deleted", func() bool {
		_, err := st.GetAlarm(context.Background(), a.ID)
		return errors.Is(err, store.ErrNotFound)
	})
	// Several more refreshes: nobody delivers a deleted alarm.
	deadline = time.Now().Add(200 * time.Millisecond)
	for time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.got) != 1 {
		t.Fatalf("deliveries %v by %v, want exactly one", rec.got, rec.by)
	}
}

// TestRetriesThenFails: failed attempts are retried with backoff and
// recorded (attempts, message, next attempt); after RetryFor the alarm
// is FAILED with the reason, no longer pending, and no longer counts
// toward the limit.
func TestRetriesThenFails(t *testing.T) {
	st := newStore(t, "a")
	ms := metrics.New()
	s := New(st, nil, Config{Refresh: time.Hour, RetryFor: 400 * time.Millisecond, RetryBase: 20 * time.Millisecond, RetryMax: 100 * time.Millisecond, MaxPending: 1, Metrics: ms.Alarms}, nil)
	rec := newRecorder()
	rec.fail = func(_ *store.Alarm, attempt int) error { return fmt.Errorf("actor answered 503 (attempt %d)", attempt) }
	s.deliver = rec.as("s")
	run(t, s)
	ctx := context.Background()
	a, err := s.Set(ctx, key("a"), time.Now().Add(10*time.Millisecond), "/tick")
	must(t, err)
	if _, err := s.Set(ctx, key("a"), time.Now().Add(time.Hour), "/tick"); !errors.Is(err, store.ErrTooMany) {
		t.Fatalf("second pending alarm over a limit of 1: %v, want ErrTooMany", err)
	}
	var got *store.Alarm
	testwait.Until(t, "the alarm FAILED", func() bool {
		got, err = st.GetAlarm(ctx, a.ID)
		return err == nil && got.State == store.AlarmFailed
	})
	if got.Attempts < 3 || !strings.Contains(got.Message, "actor answered 503") {
		t.Fatalf("failed alarm %+v: want ≥3 attempts and the last reason", got)
	}
	deliveries := rec.wait(t, got.Attempts)
	for i, d := range deliveries {
		if want := fmt.Sprintf("%s %d", a.ID, i+1); d != want {
			t.Fatalf("delivery %d = %q, want %q (attempts counted from 1)", i, d, want)
		}
	}
	if _, err := s.Set(ctx, key("a"), time.Now().Add(time.Hour), "/tick"); err != nil {
		t.Fatalf("a failed alarm still counts toward the limit: %v", err)
	}
	if retries, failed := attempts(t, ms, "retry"), attempts(t, ms, "failed"); retries != float64(got.Attempts-1) || failed != 1 {
		t.Fatalf("ate_alarm_attempts_total retry %v failed %v, want %d and 1", retries, failed, got.Attempts-1)
	}
}

// attempts reads ate_alarm_attempts_total{outcome}.
func attempts(t *testing.T, ms *metrics.Metrics, outcome string) float64 {
	t.Helper()
	reg, err := metrics.NewRegistry(ms)
	must(t, err)
	fams, err := reg.Gather()
	must(t, err)
	for _, f := range fams {
		if f.GetName() != "ate_alarm_attempts_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			if m.GetLabel()[0].GetValue() == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no ate_alarm_attempts_total{outcome=%q}", outcome)
	return 0
}

func TestBackoff(t *testing.T) {
	s := New(nil, nil, Config{RetryBase: time.Second, RetryMax: 10 * time.Second}, nil)
	for _, tc := range []struct {
		attempt int
		want    time.Duration
	}{{1, time.Second}, {2, 2 * time.Second}, {3, 4 * time.Second}, {4, 8 * time.Second}, {5, 10 * time.Second}, {50, 10 * time.Second}} {
		if got := s.backoff(tc.attempt); got != tc.want {
			t.Errorf("backoff(%d) = %s, want %s", tc.attempt, got, tc.want)
		}
	}
}

// fakeResumer "resumes" an actor onto worker w.
type fakeResumer struct {
	st  store.Store
	w   string
	err error
}

func (f fakeResumer) Resume(ctx context.Context, k names.ActorKey) (*store.Actor, error) {
	if f.err != nil {
		return nil, f.err
	}
	a, err := f.st.GetActor(ctx, k)
	if err != nil {
		return nil, err
	}
	a.State, a.Worker = store.Running, f.w
	return a, nil
}

// TestDeliverHTTP: a delivery POSTs to the path through the worker's
// tunnel with the tunnel's addressing headers and the alarm's; 2xx and
// 4xx are deliveries, 5xx, the tunnel's own answers and 421 failures, a
// vanished actor drops the alarm.
func TestDeliverHTTP(t *testing.T) {
	st := newStore(t, "a")
	var status int
	var hdr http.Header
	var gotPath string
	tunnel := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			t.Errorf("method %s, want POST", r.Method)
		}
		gotPath, hdr = r.URL.RequestURI(), r.Header.Clone()
		if status == http.StatusBadGateway {
			w.Header().Set(tunnelproto.HeaderError, string(tunnelproto.KindRefused))
		}
		w.WriteHeader(status)
	}))
	defer tunnel.Close()
	must(t, st.PutWorker(context.Background(), &store.Worker{Name: "w1", Node: "n", TunnelAddr: strings.TrimPrefix(tunnel.URL, "http://")}))
	s := New(st, fakeResumer{st: st, w: "w1"}, Config{}, nil)
	at := time.Date(2030, 1, 1, 0, 0, 0, 5, time.UTC)
	a := &store.Alarm{ID: "al1", Atespace: "default", Actor: "a", ActorUID: "uid-a", Path: "/tick?x=1", At: at}
	for _, tc := range []struct {
		status int
		want   string // error substring; "" = delivered
	}{
		{http.StatusOK, ""},
		{http.StatusNoContent, ""},
		{http.StatusNotFound, ""},
		{http.StatusInternalServerError, "actor answered 500"},
		{http.StatusBadGateway, "actor unreachable"},
		{tunnelproto.StatusStale, "421"},
	} {
		status = tc.status
		err := s.deliverHTTP(context.Background(), a, 2)
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Fatalf("answer %d: deliver = %v, want %q", tc.status, err, tc.want)
		}
		if gotPath != "/tick?x=1" || hdr.Get(HeaderID) != "al1" || hdr.Get(HeaderTime) != "2030-01-01T00:00:00.000000005Z" ||
			hdr.Get(HeaderAttempt) != "2" || hdr.Get(tunnelproto.HeaderWorker) != "w1" || hdr.Get(tunnelproto.HeaderActorUID) != "uid-a" {
			t.Fatalf("request %s with headers %v", gotPath, hdr)
		}
	}
	other := *a
	other.ActorUID = "uid-of-a-predecessor"
	if err := s.deliverHTTP(context.Background(), &other, 1); !errors.Is(err, errGone) {
		t.Fatalf("alarm of another incarnation: %v, want errGone", err)
	}
	s.resumer = fakeResumer{err: fmt.Errorf("resume: %w", store.ErrNotFound)}
	if err := s.deliverHTTP(context.Background(), a, 1); !errors.Is(err, errGone) {
		t.Fatalf("alarm of a deleted actor: %v, want errGone", err)
	}
}

// TestSetSelf: the self-service alarms call's verdicts, by error (the
// self-service's statuses for them are internal/apiserver's).
func TestSetSelf(t *testing.T) {
	st := newStore(t, "a")
	ctx := context.Background()
	must(t, st.PutWorker(ctx, &store.Worker{Name: "w1", Node: "n", TunnelAddr: "x"}))
	act, err := st.GetActor(ctx, key("a"))
	must(t, err)
	if _, _, err := st.ClaimWorker(ctx, act, ""); err != nil {
		t.Fatal(err)
	}
	s := New(st, nil, Config{MaxPending: 1}, nil)
	for _, tc := range []struct {
		name, worker, uid, body string
		err                     error // nil: set
		want                    string
	}{
		{"created", "w1", "uid-a", `{"in": "10m", "path": "/tick"}`, nil, ""},
		{"limit", "w1", "uid-a", `{"in": "10m", "path": "/tick"}`, store.ErrTooMany, "at most 1"},
		{"invalid", "w1", "uid-a", `{"in": "10m", "path": "tick"}`, ErrInvalid, "must start with '/'"},
		{"not JSON", "w1", "uid-a", `in=10m`, ErrInvalid, "body is not"},
		{"stale", "w1", "uid-old", `{"in": "10m", "path": "/tick"}`, nodeapi.ErrNotHosted, "no longer hosts"},
		{"unknown worker", "w9", "uid-a", `{"in": "10m", "path": "/tick"}`, nodeapi.ErrNotHosted, "not registered"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, err := s.SetSelf(ctx, tc.worker, tc.uid, []byte(tc.body))
			if tc.err == nil {
				if err != nil || a.ID == "" || a.ActorUID != "uid-a" || a.Path != "/tick" {
					t.Fatalf("SetSelf = %+v, %v; want the alarm set", a, err)
				}
				return
			}
			if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("SetSelf = %v, want %v saying %q", err, tc.err, tc.want)
			}
		})
	}
}

// idler is a Resumer and Idler that answers "ask again in 30 ms" until
// it has been asked twice, then "done".
type idler struct {
	mu    sync.Mutex
	asked []string
	done  chan struct{}
}

func (*idler) Resume(context.Context, names.ActorKey) (*store.Actor, error) { return nil, nil }

func (i *idler) PutAwayIfIdle(_ context.Context, k names.ActorKey, uid string) (time.Time, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	i.asked = append(i.asked, k.String()+" "+uid)
	if len(i.asked) < 3 {
		return time.Now().Add(30 * time.Millisecond), nil
	}
	close(i.done)
	return time.Time{}, nil
}

// TestWatchesWokenActorUntilIdle: after a delivery the scheduler asks the
// Idler about the actor until it answers done, at the times it names.
func TestWatchesWokenActorUntilIdle(t *testing.T) {
	st := newStore(t, "a")
	id := &idler{done: make(chan struct{})}
	s := New(st, id, Config{Refresh: time.Hour}, nil)
	rec := newRecorder()
	s.deliver = rec.as("s")
	run(t, s)
	if _, err := s.Set(context.Background(), key("a"), time.Now().Add(10*time.Millisecond), "/tick"); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, 1)
	select {
	case <-id.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("Idler asked %v, want three times", id.asked)
	}
	testwait.Until(t, "the watch to end", func() bool { s.mu.Lock(); defer s.mu.Unlock(); return len(s.watch) == 0 })
	id.mu.Lock()
	defer id.mu.Unlock()
	for _, a := range id.asked {
		if a != "default/a uid-a" {
			t.Fatalf("Idler asked about %q, want default/a uid-a", a)
		}
	}
}

// staleList is a store whose ListAlarms answers as if read before any
// alarm was set.
type staleList struct{ store.Store }

func (staleList) ListAlarms(context.Context, string, string) ([]*store.Alarm, error) { return nil, nil }

// TestRefreshKeepsAlarmsSetDuringIt: a refresh whose read began before
// an alarm was set keeps that alarm's due time; a later one takes the
// store's word.
func TestRefreshKeepsAlarmsSetDuringIt(t *testing.T) {
	st := newStore(t, "a")
	s := New(st, nil, Config{}, nil)
	clock := time.Now()
	s.now = func() time.Time { return clock }
	a, err := s.Set(context.Background(), key("a"), clock.Add(time.Minute), "/tick")
	must(t, err)
	s.st = staleList{st}
	clock = clock.Add(-time.Millisecond) // this read began before the Set
	must(t, s.refresh(context.Background()))
	if _, ok := s.due[a.ID]; !ok {
		t.Fatal("a refresh that began before the alarm was set forgot it")
	}
	clock = clock.Add(time.Second) // this one began after
	must(t, s.refresh(context.Background()))
	if _, ok := s.due[a.ID]; ok {
		t.Fatal("a refresh that began after the Set kept an alarm its read did not see")
	}
}

// TestConcurrencyBound: no more than Concurrency deliveries run at once;
// the others start as they end, all in due order.
func TestConcurrencyBound(t *testing.T) {
	st := newStore(t, "a")
	s := New(st, nil, Config{Refresh: time.Hour, Concurrency: 2}, nil)
	rec := newRecorder()
	var mu sync.Mutex
	running, most := 0, 0
	release := make(chan struct{})
	rec.fail = func(*store.Alarm, int) error {
		mu.Lock()
		running++
		most = max(most, running)
		mu.Unlock()
		<-release
		mu.Lock()
		running--
		mu.Unlock()
		return nil
	}
	s.deliver = rec.as("s")
	ctx := context.Background()
	at := time.Now().Add(50 * time.Millisecond)
	for range 5 {
		_, err := s.Set(ctx, key("a"), at, "/tick")
		must(t, err)
	}
	run(t, s)
	testwait.Until(t, "two deliveries under way", func() bool { rec.mu.Lock(); defer rec.mu.Unlock(); return len(rec.got) == 2 })
	close(release)
	rec.wait(t, 5)
	if most > 2 {
		t.Fatalf("%d deliveries ran at once, want at most 2", most)
	}
}
