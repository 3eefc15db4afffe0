package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"time"
)

// dialTimeout bounds one GET /dial: a destination the sandbox boundary
// drops (not refuses) would otherwise hold the request until the
// client's deadline.
const dialTimeout = 3 * time.Second

// dialResult is GET /dial's answer.
type dialResult struct {
	OK bool `json:"ok"`
	// Err is the dial's error text when OK is false.
	Err string `json:"err,omitempty"`
	// Reply is up to 256 bytes the peer sent first (read for at most
	// 500 ms), so a test can tell which listener answered.
	Reply string `json:"reply,omitempty"`
	// Addrs is what the host name resolved to, when addr named one.
	Addrs []string `json:"addrs,omitempty"`
}

// registerDial adds what tests of the sandbox boundary (docs/security.md,
// The sandbox boundary) need:
//
//	GET /dial?addr=HOST:PORT  opens a TCP connection from inside the
//	                          sandbox, answers 200 {"ok":true,"reply":…}
//	                          or 200 {"ok":false,"err":…}; 400 without addr
func registerDial(mux *http.ServeMux) {
	mux.HandleFunc("GET /dial", func(w http.ResponseWriter, r *http.Request) {
		addr := r.URL.Query().Get("addr")
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			http.Error(w, "addr=HOST:PORT: "+err.Error(), http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), dialTimeout)
		defer cancel()
		var res dialResult
		if net.ParseIP(host) == nil {
			res.Addrs, _ = net.DefaultResolver.LookupHost(ctx, host)
		}
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			res.Err = err.Error()
		} else {
			res.OK = true
			_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			buf := make([]byte, 256)
			n, _ := c.Read(buf)
			res.Reply = string(buf[:n])
			c.Close()
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(res)
	})
}
