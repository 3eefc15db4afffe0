package auth

import (
	"context"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestSelfAuthenticatingReachesOnlyItsHandler: an anonymous caller (no
// certificate, no bearer token) reaches IssueNodeCertificate's handler,
// which checks the token in the request, with no principal in its
// context; the same caller is Unauthenticated on every other method, and
// a stream under a self-authenticating rule is refused before its
// handler runs.
func TestSelfAuthenticatingReachesOnlyItsHandler(t *testing.T) {
	a := &Authorizer{}
	unary := a.UnaryInterceptor()
	ran := false
	handler := func(ctx context.Context, _ any) (any, error) {
		ran = true
		if _, ok := FromContext(ctx); ok {
			t.Error("the self-authenticating handler got a principal")
		}
		return &atev1.IssueNodeCertificateResponse{}, nil
	}
	if _, err := unary(context.Background(), &atev1.IssueNodeCertificateRequest{},
		&grpc.UnaryServerInfo{FullMethod: atev1.NodeIdentity_IssueNodeCertificate_FullMethodName}, handler); err != nil || !ran {
		t.Fatalf("anonymous IssueNodeCertificate: %v, handler ran %v", err, ran)
	}
	for _, m := range []string{atev1.Control_ListAtespaces_FullMethodName, atev1.NodeRegistry_SelfCall_FullMethodName,
		"ate.v1.NodeIdentity/IssueNodeCertificate", "/ate.v1.NodeIdentity/IssueNodeCertificates"} {
		ran = false
		_, err := unary(context.Background(), &atev1.ListAtespacesRequest{}, &grpc.UnaryServerInfo{FullMethod: m}, handler)
		if code := status.Code(err); ran || (code != codes.Unauthenticated && code != codes.PermissionDenied) {
			t.Errorf("anonymous %s: %v, handler ran %v; want refused before the handler", m, err, ran)
		}
	}
	streamRan := false
	err := a.StreamInterceptor()(nil, nil, &grpc.StreamServerInfo{FullMethod: atev1.NodeIdentity_IssueNodeCertificate_FullMethodName},
		func(any, grpc.ServerStream) error { streamRan = true; return nil })
	if err == nil || streamRan {
		t.Errorf("a stream under a self-authenticating rule: %v, handler ran %v", err, streamRan)
	}
}
