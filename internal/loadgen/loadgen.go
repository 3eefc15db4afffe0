// Package loadgen drives an HTTP/1.1 server the way proxy benchmarks do:
// a fixed number of keep-alive connections, each sending one prepared
// request after another (closed loop) or at a fixed total rate, recording
// every request's latency. It writes raw request bytes and parses only
// the response head, so the generator costs a fraction of net/http's
// client and leaves the CPU to the server under test.
//
// It also pins processes to CPUs and reads their CPU time (Linux), so a
// benchmark can put the server under test on one core and itself on
// another and report requests per second per core of the server.
package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config is one load run.
type Config struct {
	// Dial opens one connection to the server; required.
	Dial func(ctx context.Context) (net.Conn, error)
	// Request is one complete HTTP/1.1 request without a body
	// (NewRequest), sent again and again on each connection.
	Request []byte
	// Conns is the number of keep-alive connections (≥ 1).
	Conns int
	// Duration is how long requests are sent; requests in flight when it
	// ends are completed and counted.
	Duration time.Duration
	// Rate is the total requests per second spread evenly over the
	// connections; 0 sends each connection's next request as soon as its
	// previous response was read.
	Rate float64
}

// Result is what one run measured.
type Result struct {
	// Requests is the number of responses received, all 200.
	Requests int
	// Elapsed is from the first request to the last response.
	Elapsed time.Duration
	// Latencies holds each request's time from writing it to reading the
	// end of its response, in no particular order.
	Latencies []time.Duration
}

// PerSecond is Requests per second of Elapsed.
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Requests) / r.Elapsed.Seconds()
}

// NewRequest returns a GET of path on host with keep-alive and the given
// extra headers ("Name: value" each), as Config.Request wants.
func NewRequest(host, path string, headers ...string) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: ate-loadgen\r\n", path, host)
	for _, h := range headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("\r\n")
	return []byte(b.String())
}

// Run opens cfg.Conns connections and sends cfg.Request on each until
// cfg.Duration has passed or ctx ends. Errors: a failed dial, write or
// read, or a response other than 200 (the first one seen; the run stops).
func Run(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Conns < 1 || cfg.Dial == nil || len(cfg.Request) == 0 {
		return Result{}, errors.New("loadgen: Conns ≥ 1, Dial and Request are required")
	}
	conns := make([]net.Conn, 0, cfg.Conns)
	defer func() {
		for _, c := range conns {
			_ = c.Close()
		}
	}()
	for range cfg.Conns {
		c, err := cfg.Dial(ctx)
		if err != nil {
			return Result{}, fmt.Errorf("loadgen: dial: %w", err)
		}
		conns = append(conns, c)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var interval time.Duration
	if cfg.Rate > 0 {
		interval = time.Duration(float64(cfg.Conns) / cfg.Rate * float64(time.Second))
	}
	start := time.Now()
	end := start.Add(cfg.Duration)
	lats := make([][]time.Duration, len(conns))
	var last atomic.Int64
	var wg sync.WaitGroup
	for i, c := range conns {
		wg.Go(func() {
			// Spread the paced connections' sends over one interval.
			next := start.Add(interval * time.Duration(i) / time.Duration(len(conns)))
			l, err := drive(ctx, c, cfg.Request, end, next, interval)
			lats[i] = l
			if err != nil {
				cancel(err)
			}
			if t := time.Since(start); int64(t) > last.Load() {
				last.Store(int64(t)) // racy max is fine: ends are close together
			}
		})
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return Result{}, err
	}
	var res Result
	for _, l := range lats {
		res.Latencies = append(res.Latencies, l...)
	}
	res.Requests = len(res.Latencies)
	res.Elapsed = time.Duration(last.Load())
	return res, nil
}

// drive sends req on c until end, each after the previous response, and
// with interval > 0 not before next, next+interval, …; it returns each
// request's latency.
func drive(ctx context.Context, c net.Conn, req []byte, end, next time.Time, interval time.Duration) ([]time.Duration, error) {
	br := bufio.NewReaderSize(c, 16<<10)
	lats := make([]time.Duration, 0, 1024)
	for ctx.Err() == nil {
		if interval > 0 {
			if d := time.Until(next); d > 0 {
				time.Sleep(d)
			}
			next = next.Add(interval)
		}
		sent := time.Now()
		if !sent.Before(end) {
			break
		}
		if _, err := c.Write(req); err != nil {
			return lats, fmt.Errorf("loadgen: write: %w", err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			return lats, fmt.Errorf("loadgen: read response: %w", err)
		}
		_, err = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return lats, fmt.Errorf("loadgen: read body: %w", err)
		}
		if resp.StatusCode != http.StatusOK || resp.Close {
			return lats, fmt.Errorf("loadgen: response %d (close %t), want 200 on a kept-alive connection", resp.StatusCode, resp.Close)
		}
		lats = append(lats, time.Since(sent))
	}
	return lats, nil
}
