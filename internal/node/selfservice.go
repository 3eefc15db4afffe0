package node

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"substrate.dev/ate/internal/checkpoint"
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

// SelfFunc is asked to act on the actor hosted by worker; it must not
// block on the checkpoint itself.
type SelfFunc func(worker, actorUID string, action checkpoint.Action)

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
		srv := &http.Server{Handler: n.selfHandler(s, f), ReadHeaderTimeout: 5 * time.Second}
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
		action, err := checkpoint.ParseAction(r.PathValue("action"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
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
		_, _ = w.Write([]byte(action.String() + " requested\n"))
	})
	return mux
}
