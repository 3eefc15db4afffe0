package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/coder/websocket"
)

// registerStreams adds the endpoints the router's tests stream through:
//
//	GET  /sse?n=N&gap=MS&every=K&slow=MS  Server-Sent Events "id: i" /
//	                      "data: event i" for i in 1..N, flushed one by
//	                      one, MS apart — or slow MS before every K-th
//	GET  /ws              WebSocket echo
//	POST /echo            streams the request body back as it arrives,
//	                      both ways at once (full duplex)
func registerStreams(mux *http.ServeMux) {
	mux.HandleFunc("GET /sse", serveSSE)
	mux.HandleFunc("GET /ws", serveWS)
	mux.HandleFunc("POST /echo", serveEcho)
}

// registerSleep adds a test endpoint (it writes any file and holds the
// actor busy):
//
//	GET  /sleep?ms=N&tag=T&mark=P  answers "slept N ms tag=T" after N ms
//	                      (or not at all if the client leaves first); with
//	                      mark, first writes the file P (e.g. in a volume,
//	                      so a test sees the request arrive)
func registerSleep(mux *http.ServeMux) {
	mux.HandleFunc("GET /sleep", func(w http.ResponseWriter, r *http.Request) {
		ms := intParam(r, "ms", 0)
		if mark := r.URL.Query().Get("mark"); mark != "" {
			_ = os.WriteFile(mark, []byte("arrived"), 0o644)
		}
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return
		}
		fmt.Fprintf(w, "slept %d ms tag=%s\n", ms, r.URL.Query().Get("tag"))
	})
}

// serveWS echoes every WebSocket message back as a message of the same
// type, until the client or the connection goes. Any origin is accepted:
// the counter is a test workload behind the router.
func serveWS(w http.ResponseWriter, r *http.Request) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{InsecureSkipVerify: true})
	if err != nil {
		return // Accept has answered
	}
	defer c.CloseNow()
	c.SetReadLimit(-1)
	ctx := r.Context()
	for {
		typ, rd, err := c.Reader(ctx)
		if err != nil {
			return
		}
		wr, err := c.Writer(ctx, typ)
		if err != nil {
			return
		}
		if _, err := io.Copy(wr, rd); err != nil {
			return
		}
		if err := wr.Close(); err != nil {
			return
		}
	}
}

func serveSSE(w http.ResponseWriter, r *http.Request) {
	n, gap := intParam(r, "n", 10), intParam(r, "gap", 0)
	every, slow := intParam(r, "every", 0), intParam(r, "slow", 0)
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	for i := 1; i <= n; i++ {
		if i > 1 {
			wait := gap
			if every > 0 && i%every == 0 {
				wait = slow
			}
			t := time.NewTimer(time.Duration(wait) * time.Millisecond)
			select {
			case <-t.C:
			case <-r.Context().Done():
				t.Stop()
				return
			}
		}
		if _, err := fmt.Fprintf(w, "id: %d\ndata: event %d\n\n", i, i); err != nil {
			return
		}
		if err := rc.Flush(); err != nil {
			return
		}
	}
}

// serveEcho copies the request body to the response chunk by chunk,
// flushing each, so a client can converse with it over one request.
func serveEcho(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	// HTTP/1 needs leave to read the body after the response started.
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
		}
		if err != nil { // io.EOF included: the client is done
			return
		}
	}
}

// intParam returns query parameter name as an int, or def.
func intParam(r *http.Request, name string, def int) int {
	v, err := strconv.Atoi(r.URL.Query().Get(name))
	if err != nil {
		return def
	}
	return v
}
