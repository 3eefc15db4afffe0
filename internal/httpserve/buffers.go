package httpserve

import (
	"net/http/httputil"
	"sync"
)

// copyBufferSize is what httputil.ReverseProxy allocates per response
// when it has no pool.
const copyBufferSize = 32 << 10

// bufferPool recycles ReverseProxy copy buffers. Without one every
// proxied response allocates 32 KiB, which on a busy router is most of
// its garbage and much of its CPU (in the collector). Safe for concurrent
// use.
type bufferPool struct{ p sync.Pool }

var _ httputil.BufferPool = (*bufferPool)(nil)

// NewBufferPool returns a pool of ReverseProxy copy buffers, for every
// proxy hop (the router and the worker tunnel each use one).
func NewBufferPool() httputil.BufferPool {
	return &bufferPool{p: sync.Pool{New: func() any {
		b := make([]byte, copyBufferSize)
		return &b
	}}}
}

func (b *bufferPool) Get() []byte { return *b.p.Get().(*[]byte) }

func (b *bufferPool) Put(buf []byte) { b.p.Put(&buf) }
