package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/apidial"
	"substrate.dev/ate/internal/ateconfig"
)

// Dial returns a client connection to the API server named by c. It is the
// one place that decides transport security, so TLS and bearer tokens (new
// ateconfig.Config fields) land here. Server may list several API server
// replicas or name a Kubernetes Service (package apidial; opts such as
// apidial.WithKubeconfig say how to reach the cluster). Transport
// security is ateconfig.DialOptions's. The connection is lazy, but for a k8s:/// server, whose EndpointSlices are
// listed first (within ctx). The caller must Close it.
func Dial(ctx context.Context, c ateconfig.Config, opts ...grpc.DialOption) (*grpc.ClientConn, error) {
	sec, err := ateconfig.DialOptions(c)
	if err != nil {
		return nil, err
	}
	conn, err := apidial.DialContext(ctx, c.Server, append(sec, opts...)...)
	if err != nil {
		return nil, err // apidial names the server
	}
	return conn, nil
}

// session is one command's connection to the server.
type session struct {
	client atev1.ControlClient
	conn   *grpc.ClientConn
	server string
	// tls: the connection verifies the server (certificate-authority).
	tls     bool
	timeout time.Duration
	// source is where the settings came from, for the errors they may
	// have caused (apiError).
	source configSource
}

// connect validates the global flags, resolves the config and dials. Verbs
// call it after validating their own arguments, so bad names are rejected
// even when no server is configured.
func (a *app) connect(ctx context.Context) (*session, error) {
	if err := a.validateGlobals(); err != nil {
		return nil, err
	}
	c, src, err := a.clientConfig()
	if err != nil {
		return nil, err
	}
	var opts []grpc.DialOption
	if a.kubeMode() {
		// --timeout bounds the wait for the first EndpointSlice list too
		// (a refused list is otherwise retried for the resolver's 30 s),
		// and the resolver's routine lines (endpoints changed) stay out
		// of a command's output: only its warnings and errors show.
		quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		opts = append(opts, apidial.WithKubeconfig(a.kubeconfig, a.kubeContext), apidial.WithLogger(quiet))
		if a.timeout > 0 {
			opts = append(opts, apidial.WithSyncTimeout(a.timeout))
		}
	}
	conn, err := Dial(ctx, c, opts...)
	if err != nil {
		// A CA that cannot be read, a token refused in plaintext, a
		// cluster that cannot be reached: all come from the settings.
		return nil, fmt.Errorf("%w %s", err, src)
	}
	return &session{client: atev1.NewControlClient(conn), conn: conn, server: c.Server, tls: c.CertificateAuthority != "", timeout: a.timeout, source: src}, nil
}

// close releases the connection. Its error is dropped: the command's outcome
// is already decided and nothing useful can be done about a failed close.
func (s *session) close() { _ = s.conn.Close() }

// call runs one RPC under the per-call deadline and turns a gRPC failure into
// an APIError, so what the user sees is the server's message rather than
// "rpc error: code = … desc = …".
func call[Req, Resp any](ctx context.Context, s *session, rpc func(context.Context, Req, ...grpc.CallOption) (Resp, error), req Req) (Resp, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	resp, err := rpc(ctx, req)
	if err != nil {
		return resp, s.apiError(ctx, err)
	}
	return resp, nil
}

// APIError is a failed call to the API server. Error returns the server's
// message, with a hint for the failures the user can fix locally (server not
// running, deadline too short). It implements GRPCStatus, so status.Code and
// status.FromError still see the original code.
type APIError struct {
	Status *status.Status
	hint   string
	// source, when the failure may come from the client's settings (a
	// connection or TLS failure, a rejected token), says which client
	// config and context they came from.
	source string
}

// Error returns the hint, if any, else the server's message, followed by
// the settings' source if any.
func (e *APIError) Error() string {
	msg := e.hint
	if msg == "" {
		msg = e.Status.Message()
	}
	if e.source != "" {
		msg += " " + e.source
	}
	return msg
}

// GRPCStatus returns the status the server (or the client library) reported.
func (e *APIError) GRPCStatus() *status.Status { return e.Status }

// Code returns the gRPC code of the failure.
func (e *APIError) Code() codes.Code { return e.Status.Code() }

// apiError wraps err, which came from a call made under ctx.
func (s *session) apiError(ctx context.Context, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return fmt.Errorf("call ate server %s: %w", s.server, err)
	}
	e := &APIError{Status: st}
	switch {
	case st.Code() == codes.Unavailable && !fromServer(st) && !s.tls && strings.Contains(st.Message(), "server preface"):
		// A TLS server closes a plaintext connection without a word.
		advice := "set certificate-authority in the client config (docs/security.md)"
		if s.source.kube && s.source.kubeContext != "" {
			// What a new user of kubectl ate against a TLS cluster meets.
			advice = fmt.Sprintf("store it in the ate context named like the kubeconfig context, `ate config set-context %s --certificate-authority CA.crt --token TOKEN` (docs/kubernetes.md)", s.source.kubeContext)
		}
		e.hint = fmt.Sprintf("the ate server at %s did not answer in plaintext: if it speaks TLS, pass --certificate-authority CA.crt or %s: %s", s.server, advice, transportCause(st.Message()))
	case st.Code() == codes.Unavailable && !fromServer(st) && s.tls && strings.Contains(st.Message(), "handshake"):
		// The server answered, not in TLS or not with a certificate from
		// this CA: "is it running" would mislead.
		e.hint = fmt.Sprintf("TLS handshake with the ate server at %s failed: %s", s.server, transportCause(st.Message()))
	case st.Code() == codes.Unavailable && !fromServer(st):
		e.hint = fmt.Sprintf("cannot reach the ate server at %s (is `ate up` or `ate apiserver` running? pass --server to use another): %s", s.server, transportCause(st.Message()))
	case st.Code() == codes.DeadlineExceeded && deadlineReached(ctx):
		e.hint = fmt.Sprintf("no answer from the ate server at %s within %s (raise --timeout; a resume waits until a worker is free or can be freed)", s.server, s.timeout)
	}
	// Said once here for every verb: with a local and a cluster
	// installation side by side, the wrong settings show as these codes.
	if (st.Code() == codes.Unavailable && !fromServer(st)) || st.Code() == codes.Unauthenticated {
		e.source = s.source.String()
	}
	return e
}

// transportCause is the innermost cause in a transport failure's status
// message: grpc-go nests the last attempt's status in its retry message
// ("max retries exhausted: failed after 3 attempts: rpc error: code =
// Unavailable desc = connection error: desc = \"transport: … connection
// refused\""), which names gRPC's machinery rather than what a user can
// act on.
func transportCause(msg string) string {
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = strings.Trim(msg[i+len("desc = "):], `"\`)
	}
	return strings.TrimPrefix(msg, "transport: ")
}

// deadlineSlack is how early the server may report our deadline: gRPC sends
// the deadline along and the server enforces it too, so its
// DEADLINE_EXCEEDED can arrive a moment before our own timer fires.
const deadlineSlack = time.Second

// deadlineReached reports whether ctx's deadline has (about) passed, i.e. a
// DEADLINE_EXCEEDED is ours to explain rather than one the server hit while
// calling something else.
func deadlineReached(ctx context.Context) bool {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return true
	}
	deadline, ok := ctx.Deadline()
	return ok && time.Until(deadline) < deadlineSlack
}

// fromServer reports whether st carries the ate API's ErrorInfo, i.e. the
// server answered; a transport failure carries none.
func fromServer(st *status.Status) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == atev1.ErrorDomain {
			return true
		}
	}
	return false
}
