// Package apiserver implements the gRPC Control API over a store and the
// lifecycle manager: it validates every request at the edge, converts
// between API messages and store records, and maps errors to gRPC codes
// (errors.go). It holds no state of its own.
package apiserver

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/store"
)

// Page sizes for ListActors.
const (
	defaultPageSize = 100
	maxPageSize     = 1000
)

// Server implements atev1.ControlServer. Safe for concurrent use.
type Server struct {
	atev1.UnimplementedControlServer
	store        store.Store
	lc           *lifecycle.Manager
	sandboxClass string
	// images, if set, checks templates' images at creation (images.go).
	images ImageInspector
	// ceilings are the operator's bounds on templates (ceilings.go).
	ceilings Ceilings
	// nodes answers ListNodes; nil lists none.
	nodes Nodes
	// alarms answers the alarm RPCs (alarms.go); nil: UNIMPLEMENTED.
	alarms Alarms
	log    *slog.Logger
	// ingressAuthn and ingressAuthz, when both set, let
	// ReviewIngressToken accept user tokens (ingresstokens.go).
	ingressAuthn auth.TokenAuthenticator
	ingressAuthz IngressAuthorizer
	// bindingsChanged, if set, runs after a role binding is created or
	// deleted (rolebindings.go).
	bindingsChanged func()

	// stopping is closed by EndStreams; endOnce guards the close.
	stopping chan struct{}
	endOnce  sync.Once
	// streams bounds each caller's open watches and log follows
	// (streamlimit.go).
	streams callerStreams
}

var _ atev1.ControlServer = (*Server)(nil)

// EndStreams ends the open watches and log follows (WatchEvents,
// ActorLogs with follow) with UNAVAILABLE and a message saying to watch
// again: call it as the server begins to stop. They never end by
// themselves, so a graceful stop would otherwise wait for its deadline
// on every connected `ate get … -w` or `ate logs -f`. Safe to call more
// than once.
func (s *Server) EndStreams() { s.endOnce.Do(func() { close(s.stopping) }) }

// errStopping is what EndStreams ends a stream with.
var errStopping = status.Error(codes.Unavailable, "the ate API server is shutting down: run the command again once it (or another replica) serves")

// New returns a Server. images, if not nil, checks every new template's
// image (images.go). Golden builds a request starts belong to lc.
func New(s store.Store, lc *lifecycle.Manager, sandboxClass string, images ImageInspector, logger *slog.Logger) *Server {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Server{store: s, lc: lc, sandboxClass: sandboxClass, images: images, log: logger, stopping: make(chan struct{}),
		streams: callerStreams{max: DefaultMaxStreamsPerCaller}}
}

// SetMaxStreamsPerCaller sets how many watches and log follows one caller
// (one authenticated principal) may hold open on this server at once; a
// call for one more is refused with RESOURCE_EXHAUSTED. n ≤ 0 keeps
// DefaultMaxStreamsPerCaller. Call it before the server serves.
func (s *Server) SetMaxStreamsPerCaller(n int) {
	if n > 0 {
		s.streams.max = n
	}
}

// NewUID returns a random RFC 4122 version 4 UUID.
func NewUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// EnsureDefaultAtespace creates the "default" atespace if missing.
func EnsureDefaultAtespace(ctx context.Context, s store.Store) error {
	err := s.CreateAtespace(ctx, &store.Atespace{Name: names.DefaultAtespace, UID: NewUID(), CreateTime: time.Now().UTC()})
	if err != nil && !isAlreadyExists(err) {
		return err
	}
	return nil
}

// CreateAtespace implements atev1.ControlServer.
func (s *Server) CreateAtespace(ctx context.Context, req *atev1.CreateAtespaceRequest) (*atev1.Atespace, error) {
	if err := names.ValidateLabel("atespace", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	a := &store.Atespace{Name: req.GetName(), UID: NewUID(), CreateTime: time.Now().UTC()}
	if err := s.store.CreateAtespace(ctx, a); err != nil {
		return nil, toStatus(err)
	}
	return atespaceToProto(a), nil
}

// GetAtespace implements atev1.ControlServer.
func (s *Server) GetAtespace(ctx context.Context, req *atev1.GetAtespaceRequest) (*atev1.Atespace, error) {
	if err := names.ValidateLabel("atespace", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	a, err := s.store.GetAtespace(ctx, req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return atespaceToProto(a), nil
}

// ListAtespaces implements atev1.ControlServer.
func (s *Server) ListAtespaces(ctx context.Context, _ *atev1.ListAtespacesRequest) (*atev1.ListAtespacesResponse, error) {
	list, err := s.store.ListAtespaces(ctx)
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListAtespacesResponse{}
	for _, a := range list {
		out.Atespaces = append(out.Atespaces, atespaceToProto(a))
	}
	return out, nil
}

// DeleteAtespace implements atev1.ControlServer.
func (s *Server) DeleteAtespace(ctx context.Context, req *atev1.DeleteAtespaceRequest) (*atev1.DeleteAtespaceResponse, error) {
	if err := names.ValidateLabel("atespace", req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := s.store.DeleteAtespace(ctx, req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	return &atev1.DeleteAtespaceResponse{}, nil
}

// CreateActorTemplate implements atev1.ControlServer.
func (s *Server) CreateActorTemplate(ctx context.Context, req *atev1.CreateActorTemplateRequest) (*atev1.ActorTemplate, error) {
	in := req.GetTemplate()
	if err := names.ValidateLabel("atespace", in.GetAtespace()); err != nil {
		return nil, toStatus(err)
	}
	if err := names.ValidateLabel("template name", in.GetName()); err != nil {
		return nil, toStatus(err)
	}
	if err := validateTemplateSpec(in.GetSpec(), s.sandboxClass); err != nil {
		return nil, toStatus(err)
	}
	if err := s.ceilings.check(in.GetAtespace(), in.GetSpec()); err != nil {
		return nil, toStatus(err)
	}
	spec := proto.CloneOf(in.GetSpec())
	if err := imageDefaults(ctx, s.images, in.GetAtespace(), spec); err != nil {
		return nil, toStatus(err)
	}
	t := &store.Template{Atespace: in.GetAtespace(), Name: in.GetName(), UID: NewUID(),
		Spec: spec, CreateTime: time.Now().UTC(), Phase: store.TemplateBuilding}
	if err := s.store.CreateTemplate(ctx, t); err != nil {
		return nil, toStatus(err)
	}
	s.lc.StartGoldenBuild(t)
	return templateToProto(t), nil
}

// GetActorTemplate implements atev1.ControlServer.
func (s *Server) GetActorTemplate(ctx context.Context, req *atev1.GetActorTemplateRequest) (*atev1.ActorTemplate, error) {
	if err := validatePair("template name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	t, err := s.store.GetTemplate(ctx, req.GetAtespace(), req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	return templateToProto(t), nil
}

// ListActorTemplates implements atev1.ControlServer; an empty atespace
// lists every atespace's templates.
func (s *Server) ListActorTemplates(ctx context.Context, req *atev1.ListActorTemplatesRequest) (*atev1.ListActorTemplatesResponse, error) {
	if req.GetAtespace() != "" {
		if err := names.ValidateLabel("atespace", req.GetAtespace()); err != nil {
			return nil, toStatus(err)
		}
	}
	list, err := s.store.ListTemplates(ctx, req.GetAtespace())
	if err != nil {
		return nil, toStatus(err)
	}
	out := &atev1.ListActorTemplatesResponse{}
	for _, t := range list {
		out.Templates = append(out.Templates, templateToProto(t))
	}
	return out, nil
}

// DeleteActorTemplate implements atev1.ControlServer.
func (s *Server) DeleteActorTemplate(ctx context.Context, req *atev1.DeleteActorTemplateRequest) (*atev1.DeleteActorTemplateResponse, error) {
	if err := validatePair("template name", req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	t, err := s.store.GetTemplate(ctx, req.GetAtespace(), req.GetName())
	if err != nil {
		return nil, toStatus(err)
	}
	if err := s.store.DeleteTemplate(ctx, req.GetAtespace(), req.GetName()); err != nil {
		return nil, toStatus(err)
	}
	s.lc.DeleteTemplateSnapshots(ctx, t)
	return &atev1.DeleteActorTemplateResponse{}, nil
}

func validatePair(kind, atespace, name string) error {
	if err := names.ValidateLabel("atespace", atespace); err != nil {
		return err
	}
	return names.ValidateLabel(kind, name)
}

func isAlreadyExists(err error) bool { return errors.Is(err, store.ErrAlreadyExists) }
