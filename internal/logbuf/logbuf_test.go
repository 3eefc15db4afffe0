package logbuf

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"substrate.dev/ate/internal/testwait"
)

// syncBuffer is a bytes.Buffer safe for the Writer's timer goroutine,
// counting the writes it receives.
type syncBuffer struct {
	mu     sync.Mutex
	b      bytes.Buffer
	writes int
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.writes++
	return s.b.Write(p)
}

func (s *syncBuffer) state() (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String(), s.writes
}

func TestHandler(t *testing.T) {
	deferrable := func(r slog.Record) bool { return r.Message == "request" && r.Level == slog.LevelInfo }
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
		// immediate is what out holds right after logging, before any
		// timer; writes how many writes brought it.
		immediate []string
		writes    int
	}{
		{"deferrable records wait", func(l *slog.Logger) {
			l.Info("request", "n", 1)
			l.Info("request", "n", 2)
		}, nil, 0},
		{"another record flushes them, in order, in one write", func(l *slog.Logger) {
			l.Info("request", "n", 1)
			l.Info("request", "n", 2)
			l.Warn("request failed")
		}, []string{`"n":1`, `"n":2`, `request failed`}, 1},
		{"a warning named like a deferrable record is not deferred", func(l *slog.Logger) {
			l.Warn("request")
		}, []string{`"level":"WARN"`}, 1},
		{"derived loggers flush too", func(l *slog.Logger) {
			l.Info("request", "n", 1)
			l.WithGroup("g").With("actor", "a").Info("ready")
		}, []string{`"n":1`, `"g":{"actor"`}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := &syncBuffer{}
			w := NewWriter(out, time.Hour)
			l := slog.New(NewHandler(slog.NewJSONHandler(w, nil), w, deferrable))
			tc.log(l)
			got, writes := out.state()
			if writes != tc.writes {
				t.Errorf("%d writes to out, want %d", writes, tc.writes)
			}
			if tc.immediate == nil && got != "" {
				t.Errorf("out = %q, want nothing yet", got)
			}
			for _, want := range tc.immediate {
				if !strings.Contains(got, want) {
					t.Errorf("out = %q, want %q in it", got, want)
				}
			}
		})
	}
}

func TestWriterFlushesAfterDelay(t *testing.T) {
	out := &syncBuffer{}
	w := NewWriter(out, 10*time.Millisecond)
	if _, err := w.Write([]byte("a\n")); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, "the delayed flush", func() bool {
		got, _ := out.state()
		return got == "a\n"
	})
}

func TestWriterFlushesWhenFull(t *testing.T) {
	out := &syncBuffer{}
	w := NewWriter(out, time.Hour)
	line := bytes.Repeat([]byte("x"), 1000)
	for range maxBuffered/len(line) + 2 { // one line more than fills it
		if _, err := w.Write(line); err != nil {
			t.Fatal(err)
		}
	}
	if got, writes := out.state(); writes != 1 || len(got) < maxBuffered {
		t.Errorf("%d writes, %d bytes out, want 1 write of ≥ %d", writes, len(got), maxBuffered)
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if _, writes := out.state(); writes != 2 {
		t.Errorf("%d writes after Flush, want 2", writes)
	}
}
