package router

import (
	"errors"
	"io"
	"sync"
	"time"
)

// errNotWritable: a Write on a watched body that is not an upgraded
// connection.
var errNotWritable = errors.New("response body is not writable")

// idleWatch wraps a response body or, for 101 Switching Protocols, the
// upgraded connection (which ReverseProxy writes the client's bytes to),
// and calls onIdle once when no byte has moved either way for timeout.
// Closing it stops the watch. Read and Write may be called concurrently
// (an upgrade copies both directions at once).
type idleWatch struct {
	rc      io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
}

func watchIdle(rc io.ReadCloser, timeout time.Duration, onIdle func()) io.ReadWriteCloser {
	w := &idleWatch{rc: rc, timeout: timeout}
	w.timer = time.AfterFunc(timeout, sync.OnceFunc(onIdle))
	return w
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
