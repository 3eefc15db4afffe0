// Package dashboard serves the web dashboard of an API server: actors with
// their state, worker and last activity, each with suspend, resume and
// delete buttons; workers and nodes; templates and their golden snapshot
// state; an activation latency chart drawn from the process's
// histograms; and recent events.
//
// Pages are rendered on the server (html/template); one small committed
// script (assets/dashboard.js, embedded) refreshes the page's content
// every two seconds and posts the buttons' actions. There is no build
// step. Every read and every action is a Control API call through a
// gRPC client (the server's own, in `ate up`), so whatever the Control
// API checks — its validation now, its authorisation later — applies to
// the dashboard as to the CLI; the request's Authorization header is
// passed on as the call's metadata. Actions are POSTs guarded against
// cross-site requests (net/http's CrossOriginProtection: Sec-Fetch-Site,
// else Origin against Host).
package dashboard

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/checkpoint"
)

// Control is the part of the Control API the dashboard calls;
// atev1.ControlClient implements it.
type Control interface {
	ListActors(ctx context.Context, in *atev1.ListActorsRequest, opts ...grpc.CallOption) (*atev1.ListActorsResponse, error)
	ListActorTemplates(ctx context.Context, in *atev1.ListActorTemplatesRequest, opts ...grpc.CallOption) (*atev1.ListActorTemplatesResponse, error)
	ListWorkers(ctx context.Context, in *atev1.ListWorkersRequest, opts ...grpc.CallOption) (*atev1.ListWorkersResponse, error)
	ListNodes(ctx context.Context, in *atev1.ListNodesRequest, opts ...grpc.CallOption) (*atev1.ListNodesResponse, error)
	SuspendActor(ctx context.Context, in *atev1.SuspendActorRequest, opts ...grpc.CallOption) (*atev1.Actor, error)
	ResumeActor(ctx context.Context, in *atev1.ResumeActorRequest, opts ...grpc.CallOption) (*atev1.Actor, error)
	DeleteActor(ctx context.Context, in *atev1.DeleteActorRequest, opts ...grpc.CallOption) (*atev1.DeleteActorResponse, error)
	// ListAtespaces checks a token at login.
	ListAtespaces(ctx context.Context, in *atev1.ListAtespacesRequest, opts ...grpc.CallOption) (*atev1.ListAtespacesResponse, error)
}

var _ Control = atev1.ControlClient(nil)

// Limits of one page.
const (
	// MaxActors is the most actors a page lists (ten ListActors pages of
	// 100); beyond it the page says how many it left out is unknown and
	// points to `ate get actors`.
	MaxActors = 1000
	// EventLimit is how many recent events a page shows.
	EventLimit = 50
	// readTimeout bounds the reads that render a page.
	readTimeout = 10 * time.Second
	// actionTimeout bounds an action: a resume waits for a worker (the
	// router's park budget is 30 s) and a checkpoint of a large actor
	// takes seconds.
	actionTimeout = 60 * time.Second
	// RefreshInterval is how often the page's script reloads its
	// content.
	RefreshInterval = 2 * time.Second
)

//go:embed assets
var assets embed.FS

// Config is what a dashboard reads from.
type Config struct {
	// Control is the Control API client every read and action goes
	// through. Required.
	Control Control
	// Latency draws the latency chart; nil shows that no metrics are
	// recorded.
	Latency *LatencyHistory
	// Events lists recent events; nil means NoEvents.
	Events EventLister
	// Logger receives failed actions' causes; nil discards.
	Logger *slog.Logger
	// Now is the clock; nil means time.Now. For tests.
	Now func() time.Time
	// RequireLogin makes every page ask for an API token first (a login
	// form that sets an HttpOnly, SameSite=Strict cookie), which every
	// Control call then carries: the dashboard acts with its user's
	// rights, never its own. Set it whenever the API checks tokens.
	RequireLogin bool
}

// TokenCookie is the cookie holding the dashboard user's API token over
// plain HTTP; SecureTokenCookie is its name over HTTPS, where the
// __Host- prefix makes browsers take it only Secure, for Path=/ and from
// this very host (no sibling subdomain can set or overwrite it). Only the
// name of the request's scheme is read. CookieTTL is how long a browser
// keeps it: a token left in a browser expires there.
const (
	TokenCookie       = "ate_token"
	SecureTokenCookie = "__Host-" + TokenCookie
	CookieTTL         = 8 * time.Hour
)

// tokenCookieName is the token cookie's name for r's scheme.
func tokenCookieName(r *http.Request) string {
	if r.TLS != nil {
		return SecureTokenCookie
	}
	return TokenCookie
}

// tokenCookie is the token cookie for r's scheme holding tok for
// CookieTTL; an empty tok deletes it.
func tokenCookie(r *http.Request, tok string) *http.Cookie {
	c := &http.Cookie{Name: tokenCookieName(r), Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil}
	if tok == "" {
		c.MaxAge = -1
	} else {
		c.MaxAge, c.Expires = int(CookieTTL/time.Second), time.Now().Add(CookieTTL)
	}
	return c
}

// Handler serves the dashboard:
//
//	GET  /                          the page
//	GET  /content                   the page's refreshed part (the script polls it)
//	GET  /static/…                  the embedded script and style sheet
//	POST /actors/{atespace}/{name}/{action}   action = suspend, resume or delete;
//	                                answers JSON {"actor": "…", "state": "…"} or {"error": "…"}
//	GET  /login, POST /login        the token form; a token the API accepts is kept in
//	                                the token cookie (RequireLogin)
//	POST /logout                    forget the token
//
// Safe for concurrent use.
type Handler struct {
	cfg  Config
	page *template.Template
	mux  *http.ServeMux
	log  *slog.Logger
}

var _ http.Handler = (*Handler)(nil)

// New returns the dashboard's handler. Errors: a nil Control, or the
// embedded templates failing to parse (a build defect).
func New(cfg Config) (*Handler, error) {
	if cfg.Control == nil {
		return nil, fmt.Errorf("dashboard: no Control client")
	}
	if cfg.Events == nil {
		cfg.Events = NoEvents{}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	page, err := template.New("page.html").Funcs(template.FuncMap{
		"stateClass": stateClass,
		"ago":        func(t time.Time) string { return ago(cfg.Now(), t) },
		"short":      short,
		"ts":         tsTime,
	}).ParseFS(assets, "assets/page.html")
	if err != nil {
		return nil, fmt.Errorf("dashboard: templates: %w", err)
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, fmt.Errorf("dashboard: assets: %w", err)
	}
	h := &Handler{cfg: cfg, page: page, mux: http.NewServeMux(), log: log}
	h.mux.HandleFunc("GET /{$}", h.servePage)
	h.mux.HandleFunc("GET /content", h.serveContent)
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	// Actions change state: refused unless the browser says the request
	// comes from the dashboard's own origin.
	h.mux.Handle("POST /actors/{atespace}/{name}/{action}", http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.serveAction)))
	h.mux.HandleFunc("GET /login", h.serveLoginForm)
	h.mux.Handle("POST /login", http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.serveLogin)))
	h.mux.Handle("POST /logout", http.NewCrossOriginProtection().Handler(http.HandlerFunc(h.serveLogout)))
	return h, nil
}

// ServeHTTP serves the routes New documents.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("X-Frame-Options", "DENY")
	// Only the embedded script and style sheet run; nothing inline, no
	// other origin (the favicon is an empty data: URL).
	w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'")
	w.Header().Set("Referrer-Policy", "same-origin")
	h.mux.ServeHTTP(w, r)
}

func (h *Handler) servePage(w http.ResponseWriter, r *http.Request) {
	if h.cfg.RequireLogin && !hasCredentials(r) {
		http.Redirect(w, r, "login", http.StatusSeeOther)
		return
	}
	h.render(w, r, "page")
}

func (h *Handler) serveContent(w http.ResponseWriter, r *http.Request) {
	if h.cfg.RequireLogin && !hasCredentials(r) {
		// The script reloads the page on this and lands on the form.
		http.Error(w, "sign in again", http.StatusUnauthorized)
		return
	}
	h.render(w, r, "content")
}

// hasCredentials reports whether r carries a token (cookie or header).
func hasCredentials(r *http.Request) bool {
	if r.Header.Get("Authorization") != "" {
		return true
	}
	c, err := r.Cookie(tokenCookieName(r))
	return err == nil && c.Value != ""
}

type loginView struct{ Error string }

func (h *Handler) serveLoginForm(w http.ResponseWriter, r *http.Request) {
	h.renderLogin(w, http.StatusOK, "")
}

func (h *Handler) renderLogin(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	if err := h.page.ExecuteTemplate(w, "login", loginView{Error: msg}); err != nil {
		h.log.Warn("dashboard render", "err", err)
	}
}

// serveLogin checks the token with one read the API authenticates
// (ListAtespaces) and keeps it in an HttpOnly, SameSite=Strict cookie
// (tokenCookie), so no script reads it and no other site's request
// carries it, for CookieTTL.
func (h *Handler) serveLogin(w http.ResponseWriter, r *http.Request) {
	tok := strings.TrimSpace(r.PostFormValue("token"))
	if tok == "" {
		h.renderLogin(w, http.StatusBadRequest, "Enter a token.")
		return
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(r.Context(), "authorization", "Bearer "+tok), readTimeout)
	defer cancel()
	if _, err := h.cfg.Control.ListAtespaces(ctx, &atev1.ListAtespacesRequest{}); err != nil {
		st := status.Convert(err)
		if st.Code() == codes.Unauthenticated {
			h.renderLogin(w, http.StatusUnauthorized, "The API did not accept this token.")
			return
		}
		h.log.Warn("dashboard login: token check", "err", err)
		h.renderLogin(w, http.StatusServiceUnavailable, "Could not check the token: "+st.Message())
		return
	}
	http.SetCookie(w, tokenCookie(r, tok))
	http.Redirect(w, r, "./", http.StatusSeeOther)
}

func (h *Handler) serveLogout(w http.ResponseWriter, r *http.Request) {
	http.SetCookie(w, tokenCookie(r, ""))
	http.Redirect(w, r, "login", http.StatusSeeOther)
}

// render executes the named template over a fresh view of the API.
func (h *Handler) render(w http.ResponseWriter, r *http.Request, name string) {
	ctx, cancel := context.WithTimeout(callContext(r), readTimeout)
	defer cancel()
	v := h.load(ctx)
	if v.unauthenticated && h.cfg.RequireLogin {
		// The cookie's token expired or was revoked: sign in again.
		http.SetCookie(w, tokenCookie(r, ""))
		if name == "page" {
			http.Redirect(w, r, "login", http.StatusSeeOther)
		} else {
			http.Error(w, "sign in again", http.StatusUnauthorized)
		}
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if err := h.page.ExecuteTemplate(w, name, v); err != nil {
		// Headers are sent; the client sees a truncated page.
		h.log.Warn("dashboard render", "err", err)
	}
}

// actionResult is an action's JSON answer.
type actionResult struct {
	Actor string `json:"actor,omitempty"`
	State string `json:"state,omitempty"`
	Error string `json:"error,omitempty"`
}

func (h *Handler) serveAction(w http.ResponseWriter, r *http.Request) {
	atespace, name, action := r.PathValue("atespace"), r.PathValue("name"), r.PathValue("action")
	ctx, cancel := context.WithTimeout(callContext(r), actionTimeout)
	defer cancel()
	res := actionResult{Actor: atespace + "/" + name}
	var err error
	switch action {
	case checkpoint.Suspend.String():
		var a *atev1.Actor
		if a, err = h.cfg.Control.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: atespace, Name: name}); err == nil {
			res.State = a.GetState().String()
		}
	case "resume":
		var a *atev1.Actor
		if a, err = h.cfg.Control.ResumeActor(ctx, &atev1.ResumeActorRequest{Atespace: atespace, Name: name}); err == nil {
			res.State = a.GetState().String()
		}
	case "delete":
		if _, err = h.cfg.Control.DeleteActor(ctx, &atev1.DeleteActorRequest{Atespace: atespace, Name: name}); err == nil {
			res.State = "DELETED"
		}
	default:
		writeJSON(w, http.StatusNotFound, actionResult{Error: fmt.Sprintf("unknown action %q: use suspend, resume or delete", action)})
		return
	}
	if err != nil {
		st := status.Convert(err)
		h.log.Info("dashboard action refused", "action", action, "atespace", atespace, "actor", name, "code", st.Code().String(), "err", err)
		res.Error = fmt.Sprintf("%s %s: %s", action, res.Actor, st.Message())
		writeJSON(w, httpStatus(st.Code()), res)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

// callContext is r's context carrying r's Authorization header, else its
// token cookie, as the outgoing gRPC metadata "authorization", so the
// Control API sees the dashboard user's credentials, not the
// dashboard's (it has none).
func callContext(r *http.Request) context.Context {
	ctx := r.Context()
	if auth := r.Header.Get("Authorization"); auth != "" {
		return metadata.AppendToOutgoingContext(ctx, "authorization", auth)
	}
	if c, err := r.Cookie(tokenCookieName(r)); err == nil && c.Value != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.Value)
	}
	return ctx
}

// httpStatus maps a Control API code to the action's HTTP status.
func httpStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.InvalidArgument, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted, codes.FailedPrecondition:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Canceled:
		return 499 // the client left; nobody reads it
	default:
		return http.StatusInternalServerError
	}
}
