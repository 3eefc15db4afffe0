package node

import (
	"context"
	"errors"
	"io"
	"sync"

	"substrate.dev/ate/internal/metrics"
)

// listenKey keys a listening stream's *listenEnd in its request context.
const listenKey ctxKey = iota + 1

// errListenEnded is the cause of a listening stream's request cancelled
// because a checkpoint began draining its worker before the actor
// answered it.
var errListenEnded = errors.New("the worker is draining for a checkpoint")

// listenEnd ends one listening stream (streams.IsListen) when a
// checkpoint starts draining its worker, so the checkpoint does not wait
// out its drain grace for a stream that would never end by itself, and
// the client sees the response end properly (the chunked terminator on
// HTTP/1.1, END_STREAM on HTTP/2) rather than a reset. It ends the
// actor's response body: reads then report io.EOF, and the tunnel's
// proxy finishes the response as if the actor had. A stream not yet
// answered is cancelled instead (errListenEnded) and answered stale, so
// the router resolves the actor again. Safe for concurrent use.
type listenEnd struct {
	cancel  context.CancelCauseFunc
	metrics *metrics.Node

	mu sync.Mutex
	// ended is set once the drain began; body is the actor's response
	// body once it came. Both guarded by mu.
	ended bool
	body  io.ReadCloser
}

// watch ends the stream when ending is closed, unless ctx ends first.
func (le *listenEnd) watch(ctx context.Context, ending <-chan struct{}) {
	select {
	case <-ending:
		le.end()
	case <-ctx.Done():
	}
}

func (le *listenEnd) end() {
	le.mu.Lock()
	le.ended = true
	body := le.body
	le.mu.Unlock()
	if body == nil {
		le.cancel(errListenEnded)
		return
	}
	le.metrics.StreamEnded()
	// A Read blocked on the actor's connection returns at once with an
	// error, which endingBody turns into io.EOF.
	_ = body.Close()
}

func (le *listenEnd) isEnded() bool {
	le.mu.Lock()
	defer le.mu.Unlock()
	return le.ended
}

// wrap returns the actor's response body as the tunnel relays it: one
// that ends (io.EOF) once the stream is ended.
func (le *listenEnd) wrap(body io.ReadCloser) io.ReadCloser {
	le.mu.Lock()
	le.body = body
	ended := le.ended
	le.mu.Unlock()
	if ended {
		le.metrics.StreamEnded()
		_ = body.Close()
	}
	return &endingBody{ReadCloser: body, le: le}
}

// endingBody is a response body that reports a clean end, not an error,
// when its listenEnd closed it.
type endingBody struct {
	io.ReadCloser
	le *listenEnd
}

func (b *endingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.le.isEnded() {
		return n, io.EOF
	}
	return n, err
}
