package router

import (
	"errors"
	"io"
	"time"
)

// errNotWritable: a Write on a watched body that is not an upgraded
// connection.
var errNotWritable = errors.New("response body is not writable")

// idleWatch wraps a response body or, for 101 Switching Protocols, the
// upgraded connection (which ReverseProxy writes the client's bytes to),
// and lets timer fire when no byte has moved either way for timeout: each
// byte moved resets it. timer belongs to the caller, who arms it first
// and makes its function act once. Closing the watch stops the timer. Read and Write may be called concurrently
// (an upgrade copies both directions at once).
type idleWatch struct {
	rc      io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
}

func watchIdle(rc io.ReadCloser, timeout time.Duration, timer *time.Timer) io.ReadWriteCloser {
	return &idleWatch{rc: rc, timeout: timeout, timer: timer}
}

func (w *idleWatch) Read(p []byte) (int, error) {
	n, err := w.rc.Read(p)
	if n > 0 {
		w.timer.Reset(w.timeout)
	}
	return n, err
}

func (w *idleWatch) Write(p []byte) (int, error) {
	wr, ok := w.rc.(io.Writer)
	if !ok {
		return 0, errNotWritable
	}
	n, err := wr.Write(p)
	if n > 0 {
		w.timer.Reset(w.timeout)
	}
	return n, err
}

func (w *idleWatch) Close() error {
	w.timer.Stop()
	return w.rc.Close()
}
