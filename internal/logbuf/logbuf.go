// Package logbuf batches log output. A Writer keeps what is written for
// at most its delay, or until it holds maxBuffered bytes, and then writes
// it in one call, so a server logging one line per request (the router's
// access log) makes one write system call per batch instead of one per
// request. Handler wraps the slog.Handler that writes to a Writer and
// flushes after every record its deferrable function does not name, so
// warnings, errors and the rare lifecycle records still reach the output
// at once, in order, and only high-rate records wait.
package logbuf

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// maxBuffered is the most a Writer holds before writing: a few hundred
// access log lines, one pipe buffer's worth (64 KiB).
const maxBuffered = 64 << 10

// Writer is an io.Writer that batches writes to out (see the package
// documentation). Safe for concurrent use. Data written is out of the
// caller's hands but, until the next flush, not yet in out's: a process
// ending must call Flush, and one killed loses at most delay's worth.
type Writer struct {
	out   io.Writer
	delay time.Duration

	mu sync.Mutex
	// buf holds what was written since the last flush; the timer, armed
	// while buf is not empty, flushes it delay after its first byte.
	// Both guarded by mu, which is also held while writing to out, so
	// batches reach out whole and in order.
	buf   []byte
	timer *time.Timer
}

// NewWriter returns a Writer onto out that holds data for at most delay
// (> 0).
func NewWriter(out io.Writer, delay time.Duration) *Writer {
	w := &Writer{out: out, delay: delay}
	w.timer = time.AfterFunc(time.Hour, func() { _ = w.Flush() })
	w.timer.Stop()
	return w
}

// Write buffers p; it always returns len(p), nil, except when p filled
// the buffer and writing it failed: then that error.
func (w *Writer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.buf) == 0 {
		w.timer.Reset(w.delay)
	}
	w.buf = append(w.buf, p...)
	if len(w.buf) >= maxBuffered {
		if err := w.flushLocked(); err != nil {
			return len(p), err
		}
	}
	return len(p), nil
}

// Flush writes what is buffered to out; its error is out's.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.flushLocked()
}

func (w *Writer) flushLocked() error {
	if len(w.buf) == 0 {
		return nil
	}
	w.timer.Stop()
	_, err := w.out.Write(w.buf)
	if cap(w.buf) > 4*maxBuffered {
		w.buf = nil // one burst must not pin a large buffer
	} else {
		w.buf = w.buf[:0]
	}
	return err
}

// NewHandler returns h, which writes to w, flushing w after each record
// unless deferrable(record) — those wait for the next flush.
func NewHandler(h slog.Handler, w *Writer, deferrable func(slog.Record) bool) slog.Handler {
	return &handler{Handler: h, w: w, deferrable: deferrable}
}

type handler struct {
	slog.Handler
	w          *Writer
	deferrable func(slog.Record) bool
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if !h.deferrable(r) {
		if ferr := h.w.Flush(); err == nil {
			err = ferr
		}
	}
	return err
}

func (h *handler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(attrs), w: h.w, deferrable: h.deferrable}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w, deferrable: h.deferrable}
}
