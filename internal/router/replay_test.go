package router

import (
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReplayBody(t *testing.T) {
	t.Run("rewind yields what was read, then the rest", func(t *testing.T) {
		b := newReplayBody(io.NopCloser(strings.NewReader("hello world")))
		p := make([]byte, 5)
		if n, err := b.Read(p); n != 5 || err != nil {
			t.Fatalf("Read = %d, %v", n, err)
		}
		again, ok := b.rewind()
		if !ok {
			t.Fatal("rewind refused a small body")
		}
		if _, err := b.Read(p); !errors.Is(err, errReplayed) {
			t.Fatalf("the fenced body still reads: %v", err)
		}
		all, err := io.ReadAll(again)
		if err != nil || string(all) != "hello world" {
			t.Fatalf("rewound body = %q, %v", all, err)
		}
	})
	t.Run("a body read beyond the bound cannot be rewound", func(t *testing.T) {
		b := newReplayBody(io.NopCloser(strings.NewReader(strings.Repeat("x", maxReplayBody+10))))
		if _, err := io.Copy(io.Discard, io.LimitReader(b, maxReplayBody+1)); err != nil {
			t.Fatal(err)
		}
		if _, ok := b.rewind(); ok {
			t.Fatal("rewind kept more than maxReplayBody")
		}
	})
}
