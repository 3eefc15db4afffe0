package router

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/testwait"
)

// reviewingResolver is a fakeResolver that reviews bearer tokens as the
// control plane would: tokens maps atespace → token → subject.
type reviewingResolver struct {
	*fakeResolver
	mu      sync.Mutex
	tokens  map[string]map[string]string
	reviews atomic.Int64
}

func (r *reviewingResolver) ReviewIngress(_ context.Context, atespace, token string) (IngressReview, error) {
	r.reviews.Add(1)
	r.mu.Lock()
	defer r.mu.Unlock()
	if sub, ok := r.tokens[atespace][token]; ok {
		return IngressReview{Allowed: true, Subject: sub}, nil
	}
	return IngressReview{}, nil
}

func (r *reviewingResolver) revoke(atespace, token string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.tokens[atespace], token)
}

// ingressTunnel answers 200 with what reached the actor of the
// credentials: "auth=<Authorization> subject=<Ate-Ingress-Subject>".
func ingressTunnel(t *testing.T, hits *atomic.Int64) string {
	return newTunnel(t, func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "auth=%s subject=%s\n", r.Header.Get("Authorization"), r.Header.Get(HeaderIngressSubject))
	})
}

// ingressResolver serves default/app (and other/app) with ingress
// policy p, RUNNING when warm, else SUSPENDED until resumed.
func ingressResolver(t *testing.T, addr string, p auth.IngressPolicy, warm bool) *reviewingResolver {
	pol := Policy{Ingress: p}
	return &reviewingResolver{
		fakeResolver: &fakeResolver{t: t,
			lookup: func(_ context.Context, key names.ActorKey) (Target, bool, error) {
				tg := targetAt(key, "w1", addr)
				tg.Policy = pol
				if !warm {
					return Target{Actor: key, UID: tg.UID, Policy: pol}, false, nil
				}
				return tg, true, nil
			},
			resume: func(_ context.Context, key names.ActorKey) (Target, error) {
				tg := targetAt(key, "w1", addr)
				tg.Policy = pol
				return tg, nil
			},
		},
		tokens: map[string]map[string]string{
			"default": {"good": "ingresstoken:default/web"},
			"other":   {"elsewhere": "ingresstoken:other/web"},
		},
	}
}

// TestIngressPolicy: an actor whose template's ingress policy is token
// is reached only with a bearer token the control plane accepts for its
// atespace, checked before anything resumes it or counts the request;
// refusals are 401 with a Bearer challenge. Public actors see requests
// as sent, credentials included. Either way the actor sees only the
// router's Ate-Ingress-Subject.
func TestIngressPolicy(t *testing.T) {
	const (
		challenge = `Bearer realm="ate"`
		invalid   = `Bearer realm="ate", error="invalid_token"`
	)
	for _, tc := range []struct {
		name      string
		policy    auth.IngressPolicy
		warm      bool
		hdr       map[string]string
		status    int
		challenge string
		body      string // the tunnel's answer, or the failure's message
		resumes   int64
	}{
		{"public, anonymous", auth.IngressPublic, false, nil, 200, "", "auth= subject=\n", 1},
		{"public keeps the client's Authorization", auth.IngressPublic, true,
			map[string]string{"Authorization": "Bearer app-own"}, 200, "", "auth=Bearer app-own subject=\n", 0},
		{"public drops a forged subject", auth.IngressPublic, true,
			map[string]string{HeaderIngressSubject: "admin"}, 200, "", "auth= subject=\n", 0},
		{"token, no header", auth.IngressToken, false, nil, 401, challenge,
			"actor default/app requires a bearer token: send Authorization: Bearer <token>\n", 0},
		{"token, other scheme", auth.IngressToken, false,
			map[string]string{"Authorization": "Basic Z29vZDo="}, 401, challenge, "", 0},
		{"token, wrong token", auth.IngressToken, false,
			map[string]string{"Authorization": "Bearer bad"}, 401, invalid, "bearer token not accepted for actor default/app\n", 0},
		{"token, another atespace's token", auth.IngressToken, false,
			map[string]string{"Authorization": "Bearer elsewhere"}, 401, invalid, "", 0},
		{"token, right token", auth.IngressToken, false,
			map[string]string{"Authorization": "Bearer good"}, 200, "", "auth= subject=ingresstoken:default/web\n", 1},
		{"token, scheme in lower case", auth.IngressToken, false,
			map[string]string{"Authorization": "bearer good"}, 200, "", "auth= subject=ingresstoken:default/web\n", 1},
		{"token, right token, forged subject", auth.IngressToken, true,
			map[string]string{"Authorization": "Bearer good", HeaderIngressSubject: "admin"}, 200, "", "auth= subject=ingresstoken:default/web\n", 0},
		{"token warm, no header", auth.IngressToken, true, nil, 401, challenge, "", 0},
		{"token warm, wrong token", auth.IngressToken, true,
			map[string]string{"Authorization": "Bearer bad"}, 401, invalid, "", 0},
		{"token warm, right token", auth.IngressToken, true,
			map[string]string{"Authorization": "Bearer good"}, 200, "", "auth= subject=ingresstoken:default/web\n", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			res := ingressResolver(t, ingressTunnel(t, &hits), tc.policy, tc.warm)
			srv, h := newRouter(t, Config{}, res)
			if tc.warm {
				// Cache the target first, as a warm request finds it.
				res.tokens["default"]["warmup"] = "warmup"
				if got := get(t, srv, "app.default.actors.localhost", "/", map[string]string{"Authorization": "Bearer warmup"}); got.status != 200 {
					t.Fatalf("warm-up: %d %q", got.status, got.body)
				}
				hits.Store(0)
			}
			got := get(t, srv, "app.default.actors.localhost", "/", tc.hdr)
			if got.err != nil || got.status != tc.status {
				t.Fatalf("got %d %q (%v), want %d", got.status, got.body, got.err, tc.status)
			}
			if c := got.header.Get("WWW-Authenticate"); c != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", c, tc.challenge)
			}
			if tc.body != "" && got.msg != tc.body {
				t.Errorf("body %q, want %q", got.msg, tc.body)
			}
			if n := res.resumes.Load(); n != tc.resumes {
				t.Errorf("Resume called %d times, want %d", n, tc.resumes)
			}
			if tc.status == 401 {
				if n := hits.Load(); n != 0 {
					t.Errorf("a refused request reached the actor (%d hits)", n)
				}
				h.act.mu.Lock()
				st := h.act.actors[names.ActorKey{Atespace: "default", Name: "app"}]
				open := 0
				if st != nil {
					open = st.open
				}
				h.act.mu.Unlock()
				if open != 0 {
					t.Errorf("a refused request is counted open on the actor (%d)", open)
				}
			}
		})
	}
}

// TestIngressWithoutReviewer: a resolver that cannot review tokens (not
// an IngressReviewer) refuses every request to a token actor, even one
// with a token: the policy fails closed.
func TestIngressWithoutReviewer(t *testing.T) {
	var hits atomic.Int64
	res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, false)
	srv, _ := newRouter(t, Config{}, res.fakeResolver)
	got := get(t, srv, "app.default.actors.localhost", "/", map[string]string{"Authorization": "Bearer good"})
	if got.status != 401 || res.resumes.Load() != 0 {
		t.Fatalf("got %d %q after %d resumes, want 401 and none", got.status, got.body, res.resumes.Load())
	}
}

// TestIngressReviewCache: reviews are cached by token for the TTL,
// accepted and refused alike, so a revoked token keeps working until its
// entry expires and then stops; a refused one is asked again only then.
// Concurrent misses for one token share one review.
func TestIngressReviewCache(t *testing.T) {
	var hits atomic.Int64
	res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, true)
	const ttl = 10 * time.Second
	srv, h := newRouter(t, Config{IngressCacheTTL: ttl}, res)
	var now atomic.Int64
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	h.act.guard.now = func() time.Time { return time.Unix(0, now.Load()) }
	advance := func(d time.Duration) { now.Add(int64(d)) }
	send := func(token string) int {
		t.Helper()
		got := get(t, srv, "app.default.actors.localhost", "/", map[string]string{"Authorization": "Bearer " + token})
		if got.err != nil {
			t.Fatal(got.err)
		}
		return got.status
	}
	for _, step := range []struct {
		name    string
		do      func()
		token   string
		status  int
		reviews int64
	}{
		{"first use asks", nil, "good", 200, 1},
		{"second use is cached", nil, "good", 200, 1},
		{"wrong token asks", nil, "bad", 401, 2},
		{"wrong token is cached too", nil, "bad", 401, 2},
		{"revoked: still cached", func() { res.revoke("default", "good") }, "good", 200, 2},
		{"just before expiry", func() { advance(ttl - time.Millisecond) }, "good", 200, 2},
		{"expired: asks, refused", func() { advance(time.Millisecond) }, "good", 401, 3},
		{"refusal cached", nil, "good", 401, 3},
		{"wrong token expired: asks again", nil, "bad", 401, 4},
	} {
		if step.do != nil {
			step.do()
		}
		if s := send(step.token); s != step.status {
			t.Errorf("%s: status %d, want %d", step.name, s, step.status)
		}
		if n := res.reviews.Load(); n != step.reviews {
			t.Errorf("%s: %d reviews so far, want %d", step.name, n, step.reviews)
		}
	}
}

// TestIngressCacheBounded: the review cache never holds more than its
// limit, however many distinct tokens arrive.
func TestIngressCacheBounded(t *testing.T) {
	var hits atomic.Int64
	res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, true)
	srv, h := newRouter(t, Config{IngressCacheMax: 5}, res)
	for i := range 20 {
		get(t, srv, "app.default.actors.localhost", "/", map[string]string{"Authorization": fmt.Sprintf("Bearer t%d", i)})
	}
	h.act.guard.mu.Lock()
	n := len(h.act.guard.reviews)
	h.act.guard.mu.Unlock()
	if n > 5 || res.reviews.Load() != 20 {
		t.Fatalf("%d cached reviews after %d reviews, want at most 5 after 20", n, res.reviews.Load())
	}
}

// TestIngressHeldStream: a listening stream to a sleeping token actor
// with wakeOn: request is refused, not held, without a token.
func TestIngressHeldStream(t *testing.T) {
	var hits atomic.Int64
	res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, false)
	inner := res.lookup
	res.lookup = func(ctx context.Context, key names.ActorKey) (Target, bool, error) {
		tg, ok, err := inner(ctx, key)
		tg.Policy.Streams.WakeOnRequest = true
		return tg, ok, err
	}
	srv, _ := newRouter(t, Config{}, res)
	got := get(t, srv, "app.default.actors.localhost", "/events", map[string]string{"Accept": "text/event-stream"})
	if got.status != 401 || res.resumes.Load() != 0 {
		t.Fatalf("got %d %q, want 401 without a resume", got.status, got.body)
	}
}

// TestIngressRefusedLeaderDoesNotFailJoiners: when the policy the
// router remembered (public) is stale and the resume's own Lookup finds
// token, the anonymous request leading the shared resume is refused
// without a resume, and the authorised request that joined it leads one
// of its own: 401 for the one, 200 for the other, one resume.
func TestIngressRefusedLeaderDoesNotFailJoiners(t *testing.T) {
	var hits atomic.Int64
	res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, false)
	release := make(chan struct{})
	inner := res.lookup
	res.lookup = func(ctx context.Context, key names.ActorKey) (Target, bool, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return Target{}, false, ctx.Err()
		}
		return inner(ctx, key)
	}
	srv, h := newRouter(t, Config{}, res)
	key := names.ActorKey{Atespace: "default", Name: "app"}
	h.act.guard.remember(key, Policy{}) // stale: the template says token now

	replies := make(chan reply, 2)
	go func() { replies <- get(t, srv, "app.default.actors.localhost", "/", nil) }()
	testwait.Until(t, "the anonymous request to lead the resolution", func() bool { return h.act.flights.Waiting() == 1 })
	go func() {
		replies <- get(t, srv, "app.default.actors.localhost", "/", map[string]string{"Authorization": "Bearer good"})
	}()
	testwait.Until(t, "the authorised request to join it", func() bool { return h.act.flights.Waiting() == 2 })
	close(release)
	got := map[int]int{}
	for range 2 {
		r := <-replies
		got[r.status]++
	}
	if got[401] != 1 || got[200] != 1 || res.resumes.Load() != 1 {
		t.Fatalf("statuses %v after %d resumes, want one 401, one 200 and one resume", got, res.resumes.Load())
	}
}

// TestIngressPolicyLookupOutage: when the look that learns an actor's
// policy before parking finds the control plane unavailable, the request
// parks and retries within its budget as before, and the resume still
// checks the policy: the authorised request is served, the anonymous
// one refused, without a resume for it.
func TestIngressPolicyLookupOutage(t *testing.T) {
	for _, tc := range []struct {
		name    string
		bearer  string
		status  int
		resumes int64
	}{
		{"authorised", "good", 200, 1},
		{"anonymous", "", 401, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hits atomic.Int64
			res := ingressResolver(t, ingressTunnel(t, &hits), auth.IngressToken, false)
			var calls atomic.Int64
			inner := res.lookup
			res.lookup = func(ctx context.Context, key names.ActorKey) (Target, bool, error) {
				if calls.Add(1) == 1 {
					return Target{}, false, controlError("Unavailable", "connection refused", ErrControlPlane, ErrUnavailable)
				}
				return inner(ctx, key)
			}
			srv, _ := newRouter(t, Config{}, res)
			hdr := map[string]string{}
			if tc.bearer != "" {
				hdr["Authorization"] = "Bearer " + tc.bearer
			}
			got := get(t, srv, "app.default.actors.localhost", "/", hdr)
			if got.status != tc.status || res.resumes.Load() != tc.resumes {
				t.Fatalf("got %d %q after %d resumes, want %d after %d", got.status, got.msg, res.resumes.Load(), tc.status, tc.resumes)
			}
		})
	}
}
