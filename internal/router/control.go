package router

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/coalesce"
	"substrate.dev/ate/internal/names"
)

// listWorkersTimeout bounds one shared ListWorkers refresh; it is a read of
// the store, so anything slower means the API server is in trouble.
const listWorkersTimeout = 10 * time.Second

// ControlResolver is the Resolver, Idler and ActivityRecorder over
// Substrate's Control API. Worker tunnel addresses come from ListWorkers
// and are cached by worker name; a name missing from the cache triggers
// one shared refresh. Each actor's policy comes from its template
// (GetActorTemplate), fetched once per actor incarnation (policies.go).
//
// A ControlResolver is safe for concurrent use. It is the router's only
// gRPC client: errors are the API's status errors translated into the
// Resolver's sentinels (fromControl), the status wrapped for logs;
// conditions it detects itself (an actor RUNNING without a reachable
// worker) are ErrResumeFailed.
type ControlResolver struct {
	client atev1.ControlClient
	logger *slog.Logger
	// refresh runs one ListWorkers at a time, shared by every miss.
	refresh coalesce.Group
	// policies caches templates' policies (policies.go).
	policies policyCache

	mu sync.Mutex
	// tunnels maps worker name → tunnel host:port; guarded by mu and
	// replaced whole by each refresh, so removed workers drop out.
	tunnels map[string]tunnel
}

var (
	_ Resolver         = (*ControlResolver)(nil)
	_ Idler            = (*ControlResolver)(nil)
	_ ActivityRecorder = (*ControlResolver)(nil)
	_ IngressReviewer  = (*ControlResolver)(nil)
)

// ReviewIngress implements IngressReviewer with ReviewIngressToken.
func (c *ControlResolver) ReviewIngress(ctx context.Context, atespace, token string) (IngressReview, error) {
	resp, err := c.client.ReviewIngressToken(ctx, &atev1.ReviewIngressTokenRequest{Atespace: atespace, Token: token})
	if err != nil {
		return IngressReview{}, fmt.Errorf("review ingress token for atespace %s: %w", atespace, fromControl(err))
	}
	return IngressReview{Allowed: resp.GetAllowed(), Subject: resp.GetSubject()}, nil
}

// NewControlResolver returns a ControlResolver that asks client. A nil
// logger discards.
func NewControlResolver(client atev1.ControlClient, logger *slog.Logger) *ControlResolver {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &ControlResolver{
		client:   client,
		logger:   logger,
		refresh:  coalesce.Group{Timeout: listWorkersTimeout},
		policies: newPolicyCache(client, logger),
		tunnels:  make(map[string]tunnel),
	}
}

// Lookup implements Resolver with GetActor: ok is true only for a RUNNING
// actor; for another, the policy comes from the template (cached per
// incarnation, like a running actor's).
func (c *ControlResolver) Lookup(ctx context.Context, key names.ActorKey) (Target, bool, error) {
	a, err := c.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return Target{}, false, fmt.Errorf("get actor %s: %w", key, fromControl(err))
	}
	if a.GetState() != atev1.ActorState_RUNNING {
		p, err := c.policies.get(ctx, a)
		if err != nil {
			return Target{}, false, err
		}
		return Target{Actor: key, UID: a.GetUid(), Policy: p}, false, nil
	}
	t, err := c.target(ctx, key, a)
	if err != nil {
		return Target{}, false, err
	}
	return t, true, nil
}

// Resume implements Resolver with ResumeActor, which waits for a free
// worker until ctx's deadline and returns the RUNNING actor; the actor it
// evicted for it, if any, comes in the response header (atev1.HeaderEvicted).
func (c *ControlResolver) Resume(ctx context.Context, key names.ActorKey) (Target, Resumption, error) {
	var md metadata.MD
	a, err := c.client.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: key.Atespace, Name: key.Name}, grpc.Header(&md))
	if err != nil {
		return Target{}, Resumption{}, fmt.Errorf("resume actor %s: %w", key, fromControl(err))
	}
	if a.GetState() != atev1.ActorState_RUNNING {
		return Target{}, Resumption{}, fmt.Errorf("%w: actor %s is %s after resume", ErrResumeFailed, key, a.GetState())
	}
	t, err := c.target(ctx, key, a)
	if err != nil {
		return Target{}, Resumption{}, err
	}
	return t, c.resumption(key, md), nil
}

// resumption reads what ResumeActor's response header md says it did for
// key. The header only informs clients, so a value that is not an actor key
// (an API server that speaks a newer dialect, say) is logged and ignored
// rather than failing a resume that worked.
func (c *ControlResolver) resumption(key names.ActorKey, md metadata.MD) Resumption {
	vs := md.Get(atev1.HeaderEvicted)
	if len(vs) == 0 {
		return Resumption{}
	}
	// No default atespace: eviction crosses atespaces, so a bare name
	// says nothing reliable.
	evicted, err := names.ParseActorKey(vs[0], "")
	if err != nil {
		c.logger.Debug("ignoring unparsable resume header", "header", atev1.HeaderEvicted, "value", vs[0],
			"actor", key, "err", err)
		return Resumption{}
	}
	return Resumption{Evicted: evicted}
}

// Assigned implements Resolver with GetActor.
func (c *ControlResolver) Assigned(ctx context.Context, key names.ActorKey) (bool, error) {
	a, err := c.client.GetActor(ctx, &atev1.GetActorRequest{Atespace: key.Atespace, Name: key.Name})
	if err != nil {
		return false, fmt.Errorf("get actor %s: %w", key, fromControl(err))
	}
	switch a.GetState() {
	case atev1.ActorState_RUNNING:
		return true, nil
	case atev1.ActorState_RESUMING:
		return a.GetWorker() != "", nil
	default:
		return false, nil
	}
}

// Pause implements Idler with PauseActor, reason IDLE; an API server without it
// (codes.Unimplemented) yields ErrPauseUnsupported (with ErrControlPlane).
func (c *ControlResolver) Pause(ctx context.Context, key names.ActorKey) error {
	_, err := c.client.PauseActor(ctx, &atev1.PauseActorRequest{Atespace: key.Atespace, Name: key.Name,
		Reason: atev1.CheckpointReason_IDLE})
	if status.Code(err) == codes.Unimplemented {
		return fmt.Errorf("pause actor %s: %w: %w", key, ErrPauseUnsupported, fromControl(err))
	}
	if err != nil {
		return fmt.Errorf("pause actor %s: %w", key, fromControl(err))
	}
	return nil
}

// Suspend implements Idler with SuspendActor, reason IDLE.
func (c *ControlResolver) Suspend(ctx context.Context, key names.ActorKey) error {
	req := &atev1.SuspendActorRequest{Atespace: key.Atespace, Name: key.Name, Reason: atev1.CheckpointReason_IDLE}
	if _, err := c.client.SuspendActor(ctx, req); err != nil {
		return fmt.Errorf("suspend actor %s: %w", key, fromControl(err))
	}
	return nil
}

// maxActivitiesPerCall keeps one RecordActivity call under the API
// server's limit (10000 per call).
const maxActivitiesPerCall = 5000

// RecordActivity implements ActivityRecorder, in calls of at most
// maxActivitiesPerCall actors.
func (c *ControlResolver) RecordActivity(ctx context.Context, acts []Activity) error {
	for chunk := range slices.Chunk(acts, maxActivitiesPerCall) {
		req := &atev1.RecordActivityRequest{Activities: make([]*atev1.ActorActivity, 0, len(chunk))}
		for _, act := range chunk {
			req.Activities = append(req.Activities, atev1.NewActorActivity(act))
		}
		if _, err := c.client.RecordActivity(ctx, req); err != nil {
			return fmt.Errorf("record activity of %d actors: %w", len(chunk), fromControl(err))
		}
	}
	return nil
}

// target builds a's target: its incarnation, worker, the worker's tunnel
// address and the template's policy.
func (c *ControlResolver) target(ctx context.Context, key names.ActorKey, a *atev1.Actor) (Target, error) {
	if a.GetWorker() == "" {
		return Target{}, fmt.Errorf("%w: actor %s is %s but has no worker", ErrResumeFailed, key, a.GetState())
	}
	tn, err := c.tunnelOf(ctx, a.GetWorker())
	if err != nil {
		return Target{}, err
	}
	p, err := c.policies.get(ctx, a)
	if err != nil {
		return Target{}, err
	}
	t := Target{Actor: key, UID: a.GetUid(), Worker: a.GetWorker(), TunnelAddr: tn.addr, Node: tn.node, Policy: p}
	if n := a.GetAssignment(); n != 0 {
		t.Assignment = strconv.FormatInt(n, 10)
	}
	return t, nil
}

// tunnel is where a worker's tunnel listens and the node that registered
// the worker, whose certificate alone the tunnel may present.
type tunnel struct {
	addr, node string
}

// tunnelOf returns worker's tunnel, refreshing the cache from
// ListWorkers when the worker is not in it.
func (c *ControlResolver) tunnelOf(ctx context.Context, worker string) (tunnel, error) {
	if tn, ok := c.cachedTunnel(worker); ok {
		return tn, nil
	}
	_, _, err := c.refresh.Do(ctx, "", func(ctx context.Context) (any, error) {
		return nil, c.refreshTunnels(ctx)
	})
	if err != nil {
		return tunnel{}, err
	}
	if tn, ok := c.cachedTunnel(worker); ok {
		return tn, nil
	}
	// Its node was lost and its workers unregistered: the control plane
	// crashes the actors that held them before it deletes a worker, so
	// this is a lookup that read the actor before that crash and the
	// workers after. The request waits for the actor's recovery, as for
	// a node that does not answer (the chaos run answered such requests
	// 502 before).
	return tunnel{}, fmt.Errorf("worker %s is not listed with a tunnel address (its node was lost): %w; waiting for the control plane to recover the actor", worker, errNodeUnreachable)
}

// ForgetTunnel implements TunnelForgetter.
func (c *ControlResolver) ForgetTunnel(worker, addr string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.tunnels[worker].addr == addr {
		delete(c.tunnels, worker)
	}
}

func (c *ControlResolver) cachedTunnel(worker string) (tunnel, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	tn, ok := c.tunnels[worker]
	return tn, ok
}

func (c *ControlResolver) refreshTunnels(ctx context.Context) error {
	resp, err := c.client.ListWorkers(ctx, &atev1.ListWorkersRequest{})
	if err != nil {
		return fmt.Errorf("list workers: %w", fromControl(err))
	}
	tunnels := make(map[string]tunnel, len(resp.GetWorkers()))
	for _, w := range resp.GetWorkers() {
		if w.GetTunnelAddress() != "" {
			tunnels[w.GetName()] = tunnel{addr: w.GetTunnelAddress(), node: w.GetNode()}
		}
	}
	c.mu.Lock()
	c.tunnels = tunnels
	c.mu.Unlock()
	return nil
}

// fromControl translates err, from a Control API call, into the router's
// terms (resolver.go): the one place where gRPC codes become router
// errors. The result wraps both the sentinel and err, so the control
// plane's message reaches the logs.
//
// Unavailable is ErrResumeFailed only when the API server said so (its
// status carries the API's ErrorInfo): the same code from the transport
// means the server was not reached, ErrControlPlane.
func fromControl(err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("%w: %w", ErrControlPlane, err)
	}
	switch st.Code() {
	case codes.NotFound:
		return fmt.Errorf("%w: %w", ErrActorNotFound, err)
	case codes.ResourceExhausted:
		return fmt.Errorf("%w: %w", ErrNoCapacity, err)
	case codes.DeadlineExceeded:
		// The call's deadline passed before a worker was found, on the
		// server or by grpc-go's clock.
		return fmt.Errorf("%w: %w: %w", ErrNoCapacity, context.DeadlineExceeded, err)
	case codes.Aborted:
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case codes.InvalidArgument:
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	case codes.FailedPrecondition:
		return fmt.Errorf("%w: %w", ErrNotResumable, err)
	case codes.Unavailable:
		switch reason, ok := serverReason(st); {
		case ok && (reason == storeUnavailableReason || reason == nodeUnavailableReason):
			return fmt.Errorf("%w: %w: %w", ErrControlPlane, ErrUnavailable, err)
		case ok:
			return fmt.Errorf("%w: %w", ErrResumeFailed, err)
		}
		return fmt.Errorf("%w: %w: %w", ErrControlPlane, ErrUnavailable, err)
	case codes.Canceled:
		// The caller's context ended; nobody waits for the answer.
		return fmt.Errorf("%w: %w", context.Canceled, err)
	default:
		return fmt.Errorf("%w: %w", ErrControlPlane, err)
	}
}

// storeUnavailableReason is the API server's ErrorInfo reason for "my
// store is unreachable" (apiserver.toStatus).
const storeUnavailableReason = "STORE_UNAVAILABLE"

// nodeUnavailableReason is its reason for "the actor's node cannot be
// reached, and is not lost yet": the request parks, as for a store
// outage, until the node answers or is declared lost.
const nodeUnavailableReason = "NODE_UNAVAILABLE"

// serverReason returns the reason of the ate API's ErrorInfo st carries;
// ok is false when it carries none (a transport failure: the server did
// not answer).
func serverReason(st *status.Status) (string, bool) {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == atev1.ErrorDomain {
			return info.GetReason(), true
		}
	}
	return "", false
}
