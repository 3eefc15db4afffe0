package router

import (
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"substrate.dev/ate/internal/activation"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/tracing"
)

// AccessLogMessage is the message of the router's access log records: one
// at Info per request addressed to an actor (or to no actor, other than
// /healthz and /readyz), written when the handler returns. Attributes:
// request_id; actor (the names.ActorKey group, as in every record that
// names an actor; absent when none was named);
// method; status (the one sent, 0 if none was: a stream cut before its
// header); activation (warm, resumed, joined, or none when the request
// failed before finding its actor); wait_ms (time parked for the actor's
// lookup or resume, 0 when warm); upstream_ms (time from sending the
// request to the tunnel to the actor's response header, 0 when none came;
// a replay after a stale target counts from its last attempt); ms (the
// whole request, streaming included); bytes_in and bytes_out (request
// and response body bytes read and written; an upgraded connection's
// bytes after the 101 are not counted); trace_id when tracing is on.
const AccessLogMessage = "request"

// IsAccessRecord reports whether r is an access log record (message
// AccessLogMessage at Info): one per request, so a log sink may batch
// them (internal/logbuf) instead of writing each at once.
func IsAccessRecord(r slog.Record) bool {
	return r.Level == slog.LevelInfo && r.Message == AccessLogMessage
}

// access collects one request's access log fields. Only the request's
// own goroutine touches it, except the request body's counter, which a
// transport goroutine that ReverseProxy left behind may still add to.
type access struct {
	start time.Time
	key   names.ActorKey
	// act is the request's activation so far, over its tries (carry);
	// its kind is activation.None until a try found the actor.
	act      activated
	wait     time.Duration
	upstream time.Duration
	in       countingBody
	out      countingWriter
}

// log writes r's access record to logger.
func (a *access) log(logger *slog.Logger, r *http.Request, rid string) {
	if !logger.Enabled(r.Context(), slog.LevelInfo) {
		return
	}
	attrs := make([]slog.Attr, 0, 12)
	attrs = append(attrs, slog.String("request_id", rid))
	if a.key.Name != "" {
		attrs = append(attrs, slog.Any("actor", a.key))
	}
	attrs = append(attrs,
		slog.String("method", r.Method),
		slog.Int("status", a.out.status),
		slog.String("activation", a.act.how.String()),
		slog.Int64("wait_ms", a.wait.Milliseconds()),
		slog.Int64("upstream_ms", a.upstream.Milliseconds()),
		slog.Int64("ms", time.Since(a.start).Milliseconds()),
		slog.Int64("bytes_in", a.in.n.Load()),
		slog.Int64("bytes_out", a.out.n),
	)
	if id := tracing.TraceID(r.Context()); id != "" {
		attrs = append(attrs, slog.String("trace_id", id))
	}
	logger.LogAttrs(r.Context(), slog.LevelInfo, AccessLogMessage, attrs...)
}

// countingBody counts the bytes read from a request body.
type countingBody struct {
	io.ReadCloser
	n atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}

// countingWriter records the final status and counts the body bytes
// written through it. Unwrap lets http.ResponseController reach the
// server's writer (flushes, full duplex, hijacking for upgrades).
type countingWriter struct {
	http.ResponseWriter
	status int
	n      int64
}

func (c *countingWriter) WriteHeader(status int) {
	if c.status == 0 && (status >= 200 || status == http.StatusSwitchingProtocols) {
		c.status = status
	}
	c.ResponseWriter.WriteHeader(status)
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	n, err := c.ResponseWriter.Write(p)
	c.n += int64(n)
	return n, err
}

// Unwrap is for http.ResponseController.
func (c *countingWriter) Unwrap() http.ResponseWriter { return c.ResponseWriter }

// carry makes act, one try's activation, the request's: a request sent
// again (its target was stale, or its node was lost under it) that finds
// its actor running on a later try was still resumed, or joined a resume,
// on an earlier one, and waited for it. So the earlier activation stands
// unless the later try resumed or joined again itself, and the wait is
// the whole request's. Without this, a request that resumed its actor,
// met a node that had stopped serving and was sent again said "warm"
// after waiting seconds.
func (a *access) carry(act activated) activated {
	if act.how == activation.Warm && a.act.how != activation.None && a.act.how != activation.Warm {
		act.how, act.evicted = a.act.how, a.act.evicted
	}
	act.waited = a.wait
	a.act = act
	return act
}
