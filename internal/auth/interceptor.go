package auth

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// Authorizer establishes the principal of every call and checks it
// against Methods before the handler runs: the API server's one
// interceptor pair (UnaryInterceptor, StreamInterceptor).
type Authorizer struct {
	// Authn verifies bearer tokens.
	Authn Authenticator
	// Policy holds the role bindings.
	Policy *Policy
	// TrustDomain of component identities (default DefaultTrustDomain).
	TrustDomain string
	// AlarmAtespace returns the atespace of the alarm with id (CancelAlarm);
	// an error wrapping store.ErrNotFound when there is none.
	AlarmAtespace func(ctx context.Context, id string) (string, error)
	// Methods is the rule table (default Methods).
	Methods map[string]Rule
	Log     *slog.Logger
}

func (a *Authorizer) rules() map[string]Rule {
	if a.Methods != nil {
		return a.Methods
	}
	return Methods
}

func (a *Authorizer) log() *slog.Logger {
	if a.Log != nil {
		return a.Log
	}
	return slog.New(slog.DiscardHandler)
}

// bearer returns the token of the call's authorization metadata.
func bearer(ctx context.Context) (string, bool) {
	md, _ := metadata.FromIncomingContext(ctx)
	vals := md.Get("authorization")
	if len(vals) == 0 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(vals[0], " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", true
	}
	return strings.TrimSpace(tok), true
}

// errUnauthenticated is the one answer to a call with no or a bad
// credential: which check failed goes to the server's log only.
var errUnauthenticated = status.Error(codes.Unauthenticated, "authentication required: pass a valid bearer token (the client config's token:) or a client certificate")

// principal establishes who calls.
func (a *Authorizer) principal(ctx context.Context, method string) (*Principal, error) {
	// A component proved itself in the TLS handshake: the transport's
	// interceptors (pki.Transport.PrincipalInterceptors, the one place a
	// connection becomes an identity) put its principal into ctx.
	if p, ok := FromContext(ctx); ok && p.Component != nil {
		return p, nil
	}
	tok, present := bearer(ctx)
	if !present {
		return nil, errUnauthenticated
	}
	if a.Authn == nil {
		a.log().Warn("call refused: bearer token but no authenticator configured", "method", method)
		return nil, errUnauthenticated
	}
	p, err := a.Authn.Authenticate(ctx, tok)
	if err != nil {
		a.log().Warn("call refused: bearer token", "method", method, "err", err)
		return nil, errUnauthenticated
	}
	return p, nil
}

// NotFound is the status an absent object gets from the API server
// (apiserver's toStatus of a store.ErrNotFound: "<object>: not found"
// with reason NOT_FOUND): what a caller gets for an object in an
// atespace it may not read, so it cannot tell the atespace exists.
// object is e.g. "actor a/x" or "atespace a".
func NotFound(object string) error {
	st := status.New(codes.NotFound, object+": not found")
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "NOT_FOUND", Domain: atev1.ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// objectOf names what req addresses under rule, as the store names an
// absent one.
func objectOf(rule Rule, atespace string, req any) string {
	type named interface{ GetName() string }
	type ofActor interface{ GetActor() string }
	name := ""
	switch r := req.(type) {
	case ofActor:
		name = r.GetActor()
	case *atev1.CreateActorRequest:
		name = r.GetActor().GetName()
	case *atev1.CreateActorTemplateRequest:
		name = r.GetTemplate().GetName()
	case *atev1.ExecActorRequest:
		name = r.GetStart().GetName()
	case *atev1.CopyToActorRequest:
		name = r.GetTarget().GetName()
	case *atev1.CopyFromActorRequest:
		name = r.GetTarget().GetName()
	case named:
		name = r.GetName()
	}
	if rule.Object == "" || name == "" {
		return "atespace " + atespace
	}
	return rule.Object + " " + atespace + "/" + name
}

func denied(p *Principal, rule Rule, atespace string) error {
	where := ""
	if atespace != "" {
		where = " in atespace " + atespace
	}
	msg := fmt.Sprintf("%s may not %s%s", p, rule.Verb, where)
	st := status.New(codes.PermissionDenied, msg)
	if d, err := st.WithDetails(&errdetails.ErrorInfo{Reason: "PERMISSION_DENIED", Domain: atev1.ErrorDomain}); err == nil {
		st = d
	}
	return st.Err()
}

// decision is what authorise found: the call may go on, filtering
// cross-atespace results with keep (nil: keep everything); for a Paged
// list, atespaces are the ones the caller may read, in order.
type decision struct {
	keep      func(string) bool
	atespaces []string
}

// precheck refuses, before a stream's handler runs, what no request
// could make allowed: a component not listed, a user on a
// components-only or cluster method without being cluster admin.
func (a *Authorizer) precheck(ctx context.Context, p *Principal, method string, rule Rule) error {
	if p.Component != nil {
		if !slices.Contains(rule.Components, p.Component.Component) {
			return denied(p, rule, "")
		}
		return nil
	}
	if rule.ComponentsOnly {
		return denied(p, rule, "")
	}
	if rule.Access == Cluster {
		g, err := a.grants(ctx, p, method)
		if err != nil {
			return err
		}
		if !g.ClusterAdmin {
			return denied(p, rule, "")
		}
	}
	return nil
}

func (a *Authorizer) grants(ctx context.Context, p *Principal, method string) (Grants, error) {
	bindings, err := a.Policy.Bindings(ctx)
	if err != nil {
		a.log().Error("authorisation: role bindings unreadable", "method", method, "err", err)
		return Grants{}, status.Error(codes.Unavailable, "authorisation: role bindings unreadable; retry")
	}
	return GrantsFor(p, bindings), nil
}

// authorise checks p against rule for the request req.
func (a *Authorizer) authorise(ctx context.Context, p *Principal, method string, rule Rule, req any) (decision, error) {
	if p.Component != nil {
		if !slices.Contains(rule.Components, p.Component.Component) {
			return decision{}, denied(p, rule, "")
		}
		if rule.Node != nil && rule.Node(req) != p.Component.Name {
			return decision{}, denied(p, rule, "")
		}
		return decision{}, nil
	}
	if rule.ComponentsOnly {
		return decision{}, denied(p, rule, "")
	}
	g, err := a.grants(ctx, p, method)
	if err != nil {
		return decision{}, err
	}
	if g.ClusterAdmin {
		return decision{}, nil
	}
	var atespace string
	switch {
	case rule.Access != Read && rule.Access != Write:
		return decision{}, denied(p, rule, "")
	case rule.LookupAlarm:
		id := req.(*atev1.CancelAlarmRequest).GetId()
		if a.AlarmAtespace == nil || id == "" {
			return decision{}, denied(p, rule, "")
		}
		if atespace, err = a.AlarmAtespace(ctx, id); err != nil {
			// Absent or not: the same answer as for an unreadable one.
			return decision{}, NotFound("alarm " + id)
		}
	case rule.Atespace != nil:
		atespace = rule.Atespace(req)
	default:
		return decision{}, denied(p, rule, "")
	}
	if atespace == "" || atespace == AllAtespaces {
		if rule.Access != Read || rule.Filter == nil {
			// A write needs an atespace.
			return decision{}, denied(p, rule, "")
		}
		if g.all != "" {
			return decision{}, nil // reads every atespace
		}
		return decision{keep: g.CanRead, atespaces: g.readable()}, nil
	}
	if !g.CanRead(atespace) {
		if rule.Access == Read && rule.Filter != nil {
			// A list of an atespace the caller cannot read holds
			// nothing, as one of an absent atespace does.
			return decision{keep: func(string) bool { return false }}, nil
		}
		if rule.LookupAlarm {
			return decision{}, NotFound("alarm " + req.(*atev1.CancelAlarmRequest).GetId())
		}
		return decision{}, NotFound(objectOf(rule, atespace, req))
	}
	if rule.Access == Write && !g.CanWrite(atespace) {
		return decision{}, denied(p, rule, atespace)
	}
	return decision{}, nil
}

// pagedPrefix marks a page token pagedList made.
const pagedPrefix = "authz1:"

// pagedList answers ListActors with no atespace for a caller who may read
// only atespaces: it lists them one after another, each through the
// handler, with a page token of its own naming the atespace and the
// handler's token within it. (Filtering the all-atespaces listing
// instead would hand out page tokens naming other atespaces' actors.)
// Pages may hold fewer actors than asked, as with a label selector.
func pagedList(ctx context.Context, req *atev1.ListActorsRequest, atespaces []string, handler grpc.UnaryHandler) (any, error) {
	i, inner := 0, ""
	if tok := req.GetPageToken(); tok != "" {
		raw, err := base64.RawURLEncoding.DecodeString(tok)
		ns, in, ok := strings.Cut(strings.TrimPrefix(string(raw), pagedPrefix), "\x00")
		if err != nil || !strings.HasPrefix(string(raw), pagedPrefix) || !ok {
			return nil, status.Errorf(codes.InvalidArgument, "invalid page token %q", tok)
		}
		i, _ = slices.BinarySearch(atespaces, ns)
		if i < len(atespaces) && atespaces[i] == ns {
			inner = in
		}
	}
	if i >= len(atespaces) {
		return &atev1.ListActorsResponse{}, nil
	}
	sub := proto.Clone(req).(*atev1.ListActorsRequest)
	sub.Atespace, sub.PageToken = atespaces[i], inner
	out, err := handler(ctx, sub)
	if err != nil {
		return nil, err
	}
	resp := out.(*atev1.ListActorsResponse)
	next := ""
	switch {
	case resp.GetNextPageToken() != "":
		next = atespaces[i] + "\x00" + resp.GetNextPageToken()
	case i+1 < len(atespaces):
		next = atespaces[i+1] + "\x00"
	}
	if next != "" {
		resp.NextPageToken = base64.RawURLEncoding.EncodeToString([]byte(pagedPrefix + next))
	}
	return resp, nil
}

// UnaryInterceptor authenticates and authorises a unary call, and filters
// a cross-atespace list's response.
func (a *Authorizer) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		rule, ok := a.rules()[info.FullMethod]
		if !ok {
			return nil, status.Errorf(codes.PermissionDenied, "%s has no authorisation rule", info.FullMethod)
		}
		if rule.Access == SelfAuthenticating || rule.Access == Public {
			return handler(ctx, req)
		}
		p, err := a.principal(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		d, err := a.authorise(ctx, p, info.FullMethod, rule, req)
		if err != nil {
			return nil, err
		}
		ctx = a.withReadScope(NewContext(ctx, p), p, info.FullMethod)
		if d.keep != nil && rule.Paged {
			return pagedList(ctx, req.(*atev1.ListActorsRequest), d.atespaces, handler)
		}
		resp, err := handler(ctx, req)
		if err == nil && d.keep != nil && resp != nil {
			rule.Filter(resp, d.keep)
		}
		return resp, err
	}
}

// StreamInterceptor authenticates a streaming call before its handler
// runs and authorises it on the client's first message (where the
// atespace is), before the handler sees it; server-stream messages of a
// cross-atespace watch are filtered.
func (a *Authorizer) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		rule, ok := a.rules()[info.FullMethod]
		if !ok {
			return status.Errorf(codes.PermissionDenied, "%s has no authorisation rule", info.FullMethod)
		}
		if rule.Access == SelfAuthenticating || rule.Access == Public {
			return status.Errorf(codes.Internal, "%s: a stream cannot authenticate itself or go without", info.FullMethod)
		}
		ctx := ss.Context()
		p, err := a.principal(ctx, info.FullMethod)
		if err != nil {
			return err
		}
		if err := a.precheck(ctx, p, info.FullMethod, rule); err != nil {
			return err
		}
		return handler(srv, &checkedStream{ServerStream: ss, ctx: a.withReadScope(NewContext(ctx, p), p, info.FullMethod), a: a, p: p,
			method: info.FullMethod, rule: rule})
	}
}

// checkedStream authorises on the first message received.
type checkedStream struct {
	grpc.ServerStream
	ctx    context.Context
	a      *Authorizer
	p      *Principal
	method string
	rule   Rule

	mu      sync.Mutex
	checked bool
	err     error
	keep    func(string) bool
}

func (s *checkedStream) Context() context.Context { return s.ctx }

func (s *checkedStream) RecvMsg(m any) error {
	s.mu.Lock()
	if s.checked {
		err := s.err
		s.mu.Unlock()
		if err != nil {
			return err
		}
		return s.ServerStream.RecvMsg(m)
	}
	s.mu.Unlock()
	if err := s.ServerStream.RecvMsg(m); err != nil {
		return err
	}
	d, err := s.a.authorise(s.ctx, s.p, s.method, s.rule, m)
	s.mu.Lock()
	s.checked, s.err, s.keep = true, err, d.keep
	s.mu.Unlock()
	return err
}

func (s *checkedStream) SendMsg(m any) error {
	s.mu.Lock()
	checked, err, keep := s.checked, s.err, s.keep
	s.mu.Unlock()
	if !checked {
		// Every stream's handler reads the request first; a send before
		// that would bypass the check.
		return status.Error(codes.PermissionDenied, "stream not authorised yet")
	}
	if err != nil {
		return err
	}
	if keep != nil && !s.rule.Filter(m, keep) {
		return nil
	}
	return s.ServerStream.SendMsg(m)
}
