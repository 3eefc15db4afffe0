package apidial

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/balancer"
	"google.golang.org/grpc/balancer/roundrobin"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/resolver"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// A replica that stands still (SIGSTOP, a frozen VM, a connection left
// half-open by a partition) accepts calls and answers none, and its
// connection looks healthy until keepalive gives up on it: 15 s, since
// grpc-go allows no client ping interval under 10 s. Two things bound
// what it costs a caller:
//
//   - Reads are hedged (hedgeInterceptor): a read with no answer after
//     hedgeAfter is sent again to another replica, and the first answer
//     wins. Only reads: a second copy of a state change would run the
//     change's workflow twice, and they take long on purpose (a resume
//     waits for a free worker).
//   - Idempotent state changes (watched: a resume, suspend or pause
//     whose second call finds the state reached) are watched instead:
//     with no answer after hedgeAfter, and every hedgeAfter after that,
//     the replica is probed with a call any live server answers at once
//     (probeMethod). A replica that does not answer the probe within
//     hedgeAfter either stands still, and one that answers NOT_SERVING
//     is cut off from its record store: the change is abandoned there
//     and sent to another replica, once. A replica that answers
//     otherwise is working on it (a resume may wait seconds for a
//     worker) and is left to.
//   - The balancer (picker) sends nothing more to a replica that
//     lost such a race (it is suspect) until a call to it succeeds
//     again: reads try it once every suspectFor to find out; other calls
//     go to the others while there are any.
//
// gRFC A6's hedging policy would do the first in the service config, but
// grpc-go does not implement it, and no LB policy it exports ejects a
// replica on latency.
const (
	// hedgeAfter is far above a read's ordinary time (milliseconds, even
	// over PostgreSQL under load: BENCHMARKS.md) and far below the 15 s
	// a stalled replica would otherwise cost.
	hedgeAfter = 500 * time.Millisecond
	suspectFor = 5 * time.Second
)

// hedged are the Control methods hedgeInterceptor sends twice when the
// first copy is slow: reads, whose second copy changes nothing.
var hedged = map[string]bool{}

func init() {
	for _, m := range []string{"GetAtespace", "ListAtespaces", "GetActorTemplate", "ListActorTemplates",
		"GetActor", "ListActors", "ListWorkers", "ListNodes", "ReviewIngressToken"} {
		hedged["/ate.v1.Control/"+m] = true
	}
	balancer.Register(replicasBuilder{})
}

// watched are the Control methods whose calls watchedCall watches: the
// state changes apidial's retry policy may send twice (idempotent).
var watched = map[string]bool{}

func init() {
	for _, m := range []string{"ResumeActor", "SuspendActor", "PauseActor", "RecordActivity", "DrainNode", "RemoveNode"} {
		watched["/ate.v1.Control/"+m] = true
	}
}

// probeMethod is what a watched call's replica is probed with: gRPC's
// health check, which an API server answers at once from a cached
// status, without credentials or a store read (apiserver.StoreHealth;
// one without it answers UNIMPLEMENTED as fast); one that stands still
// answers nothing.
const probeMethod = healthpb.Health_Check_FullMethodName

// balancerName is the LB policy every API connection uses (serviceConfig).
const balancerName = "ate_replicas"

// attemptKey carries an *attempt in a hedged call's context, for the
// picker.
type attemptKey struct{}

// attempt is one copy of a hedged call: the picker records the replica
// it chose, and avoids the one the other copy went to.
type attempt struct {
	avoid string
	// want, for a probe, is the one replica it may go to.
	want string
	// change: a watched state change, which (unlike a read) never
	// goes to a suspect replica to find out whether it answers again.
	change bool
	addr   atomic.Pointer[string]
}

func (a *attempt) address() string {
	if p := a.addr.Load(); p != nil {
		return *p
	}
	return ""
}

// interceptorFor is hedgeInterceptor for a connection to target. A
// target of one address (not a list, not a name that may resolve to
// several) has no other replica to move a state change to: its watched
// calls are made as they are, and wait for the replica (moving one
// would only send it to the same replica again, and a resume that ends
// up answered by a later copy hides what became of the first).
func interceptorFor(target string) grpc.UnaryClientInterceptor {
	if addrs, err := Split(target); err == nil && len(addrs) == 1 && !strings.Contains(target, "://") {
		return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if watched[method] {
				return invoker(ctx, method, req, reply, cc, opts...)
			}
			return hedgeInterceptor(ctx, method, req, reply, cc, invoker, opts...)
		}
	}
	return hedgeInterceptor
}

// hedgeInterceptor hedges the calls in hedged and watches those in
// watched (the comment at the top of this file says why). Reads whose
// options write results into the caller's variables (header, trailer,
// peer) are not hedged: two copies would write them at once. A watched
// call's copies write into variables of their own (perAttempt).
func hedgeInterceptor(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
	out, ok := reply.(proto.Message)
	if !ok || !hedged[method] && !watched[method] {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	if watched[method] {
		return watchedCall(ctx, method, req, out, cc, invoker, opts)
	}
	if slices.ContainsFunc(opts, writesBack) {
		return invoker(ctx, method, req, reply, cc, opts...)
	}
	type result struct {
		reply proto.Message
		err   error
		at    *attempt
	}
	results := make(chan result, 2)
	var cancels []context.CancelFunc
	defer func() {
		for _, c := range cancels {
			c()
		}
	}()
	send := func(at *attempt) {
		actx, cancel := context.WithCancel(context.WithValue(ctx, attemptKey{}, at))
		cancels = append(cancels, cancel)
		r := out.ProtoReflect().New().Interface()
		go func() { results <- result{r, invoker(actx, method, req, r, cc, opts...), at} }()
	}
	first := &attempt{}
	send(first)
	timer := time.NewTimer(hedgeAfter)
	defer timer.Stop()
	var got result
	select {
	case got = <-results:
	case <-ctx.Done():
		return status.FromContextError(ctx.Err()).Err()
	case <-timer.C:
		second := &attempt{avoid: first.address()}
		send(second)
		got = <-results
		if status.Code(got.err) == codes.Unavailable {
			// That replica could not take it; the other copy may.
			got = <-results
		} else if got.at == second {
			// The first copy's replica did not answer in hedgeAfter
			// while another answered at once: it stands still.
			suspects.mark(first.address())
		}
	}
	if got.err != nil {
		return got.err
	}
	proto.Reset(out)
	proto.Merge(out, got.reply)
	return nil
}

// watchedCall makes a watched call (the comment at the top of this file
// says why and how).
func watchedCall(ctx context.Context, method string, req any, out proto.Message, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts []grpc.CallOption) error {
	avoid := ""
	for try := 0; ; try++ {
		at := &attempt{avoid: avoid, change: true}
		actx, cancel := context.WithCancel(context.WithValue(ctx, attemptKey{}, at))
		r := out.ProtoReflect().New().Interface()
		own, commit := perAttempt(opts)
		done := make(chan error, 1)
		go func() { done <- invoker(actx, method, req, r, cc, own...) }()
		returned, resend, err := watch(ctx, cc, at, done, try == 0)
		cancel()
		if resend {
			suspects.mark(at.address())
			avoid = at.address()
			continue
		}
		if err == nil {
			proto.Reset(out)
			proto.Merge(out, r)
		}
		// Only once the attempt returned: one the caller gave up on
		// may still write what it was given.
		if returned {
			commit()
		}
		return err
	}
}

// perAttempt returns opts with every option that writes back into the
// caller's variables (writesBack) pointed at variables of one attempt's
// own, and commit, which copies those into the caller's. The router's
// resume asks for the answer's header: were it passed as it is, an
// attempt abandoned on a replica that stands still, still running, and
// the next one would write it at once.
func perAttempt(opts []grpc.CallOption) (own []grpc.CallOption, commit func()) {
	own = slices.Clone(opts)
	var commits []func()
	for i, o := range own {
		switch o := o.(type) {
		case grpc.HeaderCallOption:
			md := new(metadata.MD)
			own[i] = grpc.Header(md)
			commits = append(commits, func() { *o.HeaderAddr = *md })
		case grpc.TrailerCallOption:
			md := new(metadata.MD)
			own[i] = grpc.Trailer(md)
			commits = append(commits, func() { *o.TrailerAddr = *md })
		case grpc.PeerCallOption:
			p := new(peer.Peer)
			own[i] = grpc.Peer(p)
			commits = append(commits, func() { *o.PeerAddr = *p })
		}
	}
	return own, func() {
		for _, c := range commits {
			c()
		}
	}
}

// watch waits for a watched call's result from done (returned), probing
// its replica every hedgeAfter while probing (resend: it stands still,
// or is cut off from its store).
func watch(ctx context.Context, cc *grpc.ClientConn, at *attempt, done <-chan error, probing bool) (returned, resend bool, err error) {
	tick := time.NewTicker(hedgeAfter)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return true, false, err
		case <-ctx.Done():
			return false, false, status.FromContextError(ctx.Err()).Err()
		case <-tick.C:
			if probing && at.address() != "" && !answers(ctx, cc, at.address()) {
				return false, true, nil
			}
		}
	}
}

// answers reports whether the replica at addr can go on with a change:
// it answers a probe within hedgeAfter, and not NOT_SERVING (a replica
// cut off from its record store says so: apiserver.StoreHealth). Only
// silence and NOT_SERVING are a no: an error of the probe's own
// (UNIMPLEMENTED from a server without the health check, the replica's
// connection gone, the caller's deadline) is not a verdict.
func answers(ctx context.Context, cc *grpc.ClientConn, addr string) bool {
	pctx, cancel := context.WithTimeout(context.WithValue(ctx, attemptKey{}, &attempt{want: addr}), hedgeAfter)
	defer cancel()
	var resp healthpb.HealthCheckResponse
	err := cc.Invoke(pctx, probeMethod, &healthpb.HealthCheckRequest{}, &resp)
	switch {
	case ctx.Err() != nil:
		return true
	case status.Code(err) == codes.DeadlineExceeded:
		return false
	case err == nil && resp.GetStatus() == healthpb.HealthCheckResponse_NOT_SERVING:
		return false
	}
	return true
}

// writesBack reports whether o writes a call's results into the caller's
// variables.
func writesBack(o grpc.CallOption) bool {
	switch o.(type) {
	case grpc.HeaderCallOption, grpc.TrailerCallOption, grpc.PeerCallOption:
		return true
	}
	return false
}

// suspects are the replicas (by address) that lost a hedged race, and
// when they were last tried; shared by every connection of the process,
// since an address is one replica whichever connection reaches it.
var suspects = suspectSet{since: map[string]time.Time{}}

type suspectSet struct {
	mu    sync.Mutex
	since map[string]time.Time
}

func (s *suspectSet) mark(addr string) {
	if addr == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.since[addr] = time.Now()
}

func (s *suspectSet) clear(addr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.since, addr)
}

// usable reports whether a call may go to addr: it is not suspect, or
// the call is a hedged read and nobody tried it for suspectFor (that
// read tries it, and the others wait another suspectFor).
func (s *suspectSet) usable(addr string, read bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	since, ok := s.since[addr]
	switch {
	case !ok:
		return true
	case read && time.Since(since) >= suspectFor:
		s.since[addr] = time.Now()
		return true
	}
	return false
}

// replicasBuilder builds round_robin with its ClientConn wrapped: the
// wrapper learns each SubConn's address as round_robin creates it, and
// wraps every picker round_robin makes in a picker that passes over
// suspect replicas (and, for a hedge, the first copy's). Everything
// else — addresses coming and going, connection states, an empty
// resolution — is round_robin's.
type replicasBuilder struct{}

func (replicasBuilder) Name() string { return balancerName }

func (replicasBuilder) Build(cc balancer.ClientConn, opts balancer.BuildOptions) balancer.Balancer {
	w := &replicasCC{ClientConn: cc, addrs: map[balancer.SubConn]string{}}
	return balancer.Get(roundrobin.Name).Build(w, opts)
}

type replicasCC struct {
	balancer.ClientConn
	mu    sync.Mutex
	addrs map[balancer.SubConn]string
}

func (w *replicasCC) NewSubConn(addrs []resolver.Address, opts balancer.NewSubConnOptions) (balancer.SubConn, error) {
	//lint:ignore SA1019 round_robin creates its SubConns through this; intercepting it is how their addresses are learnt.
	sc, err := w.ClientConn.NewSubConn(addrs, opts)
	if err == nil && len(addrs) > 0 {
		w.mu.Lock()
		w.addrs[sc] = addrs[0].Addr
		w.mu.Unlock()
	}
	return sc, err
}

func (w *replicasCC) UpdateState(st balancer.State) {
	if st.Picker != nil {
		st.Picker = &picker{child: st.Picker, cc: w}
	}
	w.ClientConn.UpdateState(st)
}

// known returns sc's address, and how many SubConns there are.
func (w *replicasCC) known(sc balancer.SubConn) (addr string, n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.addrs[sc], len(w.addrs)
}

// picker asks round_robin's picker again, up to once per replica, while
// it picks a suspect replica or, for a hedge, the one the first copy
// went to; when every replica is passed over it takes round_robin's
// first pick anyway.
type picker struct {
	child balancer.Picker
	cc    *replicasCC
}

func (p *picker) Pick(info balancer.PickInfo) (balancer.PickResult, error) {
	at, _ := info.Ctx.Value(attemptKey{}).(*attempt)
	if at != nil && at.want != "" {
		return p.pickWanted(info, at)
	}
	var first balancer.PickResult
	var firstAddr string
	for i := 0; ; i++ {
		res, err := p.child.Pick(info)
		if err != nil {
			return res, err
		}
		addr, n := p.cc.known(res.SubConn)
		if i == 0 {
			first, firstAddr = res, addr
		}
		if !(at != nil && addr == at.avoid) && suspects.usable(addr, at != nil && !at.change) {
			return p.done(res, addr, at), nil
		}
		if i+1 >= n {
			return p.done(first, firstAddr, at), nil
		}
	}
}

// pickWanted picks at.want's SubConn, or fails the call at once
// (UNAVAILABLE) if round_robin has none ready for it.
func (p *picker) pickWanted(info balancer.PickInfo, at *attempt) (balancer.PickResult, error) {
	for i := 0; ; i++ {
		res, err := p.child.Pick(info)
		if err != nil {
			return res, err
		}
		addr, n := p.cc.known(res.SubConn)
		if addr == at.want {
			return res, nil
		}
		if i+1 >= n {
			return balancer.PickResult{}, status.Errorf(codes.Unavailable, "replica %s not connected", at.want)
		}
	}
}

// done records the replica picked for at and clears a suspect replica
// that answered.
func (p *picker) done(res balancer.PickResult, addr string, at *attempt) balancer.PickResult {
	if at != nil {
		at.addr.Store(&addr)
	}
	next := res.Done
	res.Done = func(d balancer.DoneInfo) {
		if d.Err == nil {
			suspects.clear(addr)
		}
		if next != nil {
			next(d)
		}
	}
	return res
}
