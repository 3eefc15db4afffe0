package node

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"substrate.dev/ate/internal/netns"
)

// SelfServiceAddr is the well-known address an actor calls, from inside
// its sandbox, to ask for its own suspension: the worker's gateway, which
// only that worker's sandbox can reach.
//
//	POST http://169.254.17.1/v1/suspend   → 202, the actor is suspended
//	POST http://169.254.17.1/v1/pause     → 202, the actor is paused
//
// The answer comes before the checkpoint starts; in-flight requests drain
// as for any suspend.
const SelfServiceAddr = "169.254.17.1:80"

// SelfFunc is asked to act ("suspend" or "pause") on the actor hosted by
// worker; it must not block on the checkpoint itself.
type SelfFunc func(worker, actorUID, action string)

// ServeSelfService listens on SelfServiceAddr in every worker's outer
// namespace and serves the self-service API until ctx ends. Sandbox classes
// without namespaces (fake) have nothing to serve and return at once.
func (n *Node) ServeSelfService(ctx context.Context, f SelfFunc) error {
	var servers []*http.Server
	defer func() {
		for _, srv := range servers {
			_ = srv.Close()
		}
	}()
	for _, name := range n.order {
		s := n.slots[name]
		if s.sb.DialNetNSPath == "" {
			continue
		}
		ln, err := netns.Listen(s.sb.DialNetNSPath, "tcp", SelfServiceAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: n.selfHandler(s, f), ReadHeaderTimeout: 5 * time.Second,
			// net/http's complaints about what an actor sends stay
			// structured log lines.
			ErrorLog: slog.NewLogLogger(n.log.With("worker", name).Handler(), slog.LevelDebug)}
		servers = append(servers, srv)
		go func(ln net.Listener) {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				n.log.Warn("self-service stopped", "worker", name, "err", err)
			}
		}(ln)
	}
	<-ctx.Done()
	return nil
}

func (n *Node) selfHandler(s *slot, f SelfFunc) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/{action}", func(w http.ResponseWriter, r *http.Request) {
		action := r.PathValue("action")
		if action != "suspend" && action != "pause" {
			http.Error(w, "unknown action "+strconv.Quote(action)+": use suspend or pause", http.StatusNotFound)
			return
		}
		s.mu.Lock()
		uid := s.actorUID
		s.mu.Unlock()
		if uid == "" {
			http.Error(w, "this worker hosts no actor", http.StatusConflict)
			return
		}
		f(s.name, uid, action)
		w.WriteHeader(http.StatusAccepted)
		_, _ = w.Write([]byte(action + " requested\n"))
	})
	return mux
}
