package node

import (
	"bufio"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/tunnelproto"
)

// TestCheckpointEndsListeningStreams: a listening stream (a GET for
// Server-Sent Events) open through the tunnel is counted as one, and a
// checkpoint ends it cleanly as soon as it starts draining: the client
// reads the end of the response (io.EOF, no error), and the checkpoint
// returns although its drain grace (an hour) would outlast the test.
func TestCheckpointEndsListeningStreams(t *testing.T) {
	n, w, url := startedTunnel(t)

	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url+"/events?every=20", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set(tunnelproto.HeaderWorker, w)
	req.Header.Set(tunnelproto.HeaderActorUID, "a")
	req.Header.Set("Accept", "text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, err := rd.ReadString('\n'); err != nil || line != ": keep-alive\n" {
		t.Fatalf("first line %q, %v; want the keep-alive", line, err)
	}
	if act, _ := n.WorkerActivity(w); act.InFlight != 1 || act.Streams != 1 || act.Listeners != 1 {
		t.Fatalf("with a listening stream open: %+v, want 1 in flight, 1 stream, 1 listener", act)
	}

	if _, err := n.Checkpoint(t.Context(), w, "a", CheckpointOptions{Scope: snapshot.ScopeFull, Grace: time.Hour}); err != nil {
		t.Fatal(err)
	}
	rest, err := io.ReadAll(rd)
	if err != nil {
		t.Fatalf("stream ended with %v, want a clean end", err)
	}
	if s := string(rest); strings.Trim(strings.ReplaceAll(s, ": keep-alive\n\n", ""), "\n") != "" {
		t.Errorf("stream carried %q after its first line, want only keep-alives", s)
	}
}
