package egress

import (
	"encoding/json"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/testlog"
)

// TestRefusalLogSampled: an actor opening refused connections as fast as
// it can gets a burst of log lines and then one a second, each later
// line counting those left out, instead of a line per connection.
func TestRefusalLogSampled(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := &testlog.Buffer{}
	p := NewProxy(ln, &Deny{}, slog.New(slog.NewJSONHandler(logs, nil)))
	t.Cleanup(func() { _ = p.Close() })

	const refused = 1000
	start := time.Now()
	for range refused {
		p.logRefusal("egress refused", "dst", "10.0.0.1:22", "why", "private")
	}
	elapsed := time.Since(start)
	var lines, reported int64
	for _, l := range strings.Split(strings.TrimSpace(logs.String()), "\n") {
		var rec struct {
			Msg        string `json:"msg"`
			Suppressed int64  `json:"suppressed"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec.Msg != "egress refused" {
			continue
		}
		lines++
		reported += rec.Suppressed
	}
	if most := int64(refusalLogBurst) + int64(elapsed/time.Second) + 1; lines > most || lines == 0 {
		t.Errorf("%d refusals in %v logged %d lines, want 1..%d", refused, elapsed, lines, most)
	}
	if got := lines + reported + p.suppressed.Load(); got != refused {
		t.Errorf("logged %d + reported suppressed %d + pending %d = %d, want every refusal accounted for (%d)",
			lines, reported, p.suppressed.Load(), got, refused)
	}
}
