package router

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"time"
)

// maxReplayBody bounds how much of a request body the router keeps to
// send it again after a stale target. A stale target (the tunnel's 421, or
// nobody listening) means the actor never saw the request, so sending it
// again is safe whatever its method; the bound keeps streamed uploads
// unbuffered beyond it.
const maxReplayBody = 1 << 20

// replayFenceWait bounds how long a rewind waits for a read of the body
// still in flight in the first attempt's transport goroutine (which
// httputil.ReverseProxy may leave running after it returns).
const replayFenceWait = 5 * time.Second

// errReplayed is what the first attempt's transport reads once the body
// was handed to a second attempt.
var errReplayed = errors.New("request body handed to a retry")

// replayBody records what one attempt reads of a request body, so that
// the request can be sent again from the start. Safe for concurrent use;
// a rewind fences this body off so that only the new one reads the source.
type replayBody struct {
	src io.ReadCloser
	// sem is held during every Read and by rewind, so the source is never
	// read by two attempts at once.
	sem      chan struct{}
	buf      bytes.Buffer
	overflow bool
	fenced   bool
}

func newReplayBody(src io.ReadCloser) *replayBody {
	return &replayBody{src: src, sem: make(chan struct{}, 1)}
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.sem <- struct{}{}
	defer func() { <-b.sem }()
	if b.fenced {
		return 0, errReplayed
	}
	n, err := b.src.Read(p)
	if !b.overflow {
		if b.buf.Len()+n > maxReplayBody {
			b.overflow = true
			b.buf = bytes.Buffer{}
		} else {
			b.buf.Write(p[:n])
		}
	}
	return n, err
}

// Close leaves the source open for a rewind; the server closes the
// handler's request body.
func (b *replayBody) Close() error { return nil }

// rewind fences this body off and returns one that yields everything
// again: what was read, then the rest of the source. ok is false when too
// much was read to keep, or a read stayed in flight too long.
func (b *replayBody) rewind() (body *replayBody, ok bool) {
	select {
	case b.sem <- struct{}{}:
	case <-time.After(replayFenceWait):
		return nil, false
	}
	defer func() { <-b.sem }()
	b.fenced = true
	if b.overflow {
		return nil, false
	}
	read := bytes.NewReader(bytes.Clone(b.buf.Bytes()))
	return newReplayBody(struct {
		io.Reader
		io.Closer
	}{io.MultiReader(read, b.src), b.src}), true
}

// hasBody reports whether r carries a request body.
func hasBody(r *http.Request) bool {
	return r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}
