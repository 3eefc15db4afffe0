package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"substrate.dev/ate/internal/netns"
)

// TestTenantLimits (docs/security.md, Limits on what one tenant can
// consume), on `ate up` with runsc actors:
//   - an actor minting tokens in a loop from inside its sandbox gets its
//     burst, then 429 saying why, while an actor on the other worker
//     mints as usual;
//   - connections held to a worker's gateway up to its cap get the next
//     one answered 503, not the other worker's; closing them frees it;
//   - a CLI caller holding --max-streams-per-caller log follows gets
//     RESOURCE_EXHAUSTED for a watch more, while another user follows.
func TestTenantLimits(t *testing.T) {
	const burst, maxConns = 3, 4
	in := startUp(t, 2, "--demo", "--token-auth-file", tokenFile,
		"--self-service-rate", "0.05", "--self-service-burst", "3", "--self-service-max-conns", "4", "--max-streams-per-caller", "2")
	in.ate("create", "actor", "counter-2", "--template", "counter")
	in.mustCount("default/counter-1", 1)
	in.mustCount("default/counter-2", 1)
	w1, w2 := in.actor("counter-1").GetWorker(), in.actor("counter-2").GetWorker()
	if w1 == "" || w1 == w2 {
		t.Fatalf("counter-1 on %q, counter-2 on %q: want two workers", w1, w2)
	}

	// Minting in a loop, from inside the sandbox. At 0.05 a second no
	// call is earned back during the loop.
	var minted, limited int
	for i := range 3 * burst {
		code, body := in.get("default/counter-1", "/mint")
		switch {
		case code == http.StatusOK:
			minted++
		case code == http.StatusTooManyRequests && strings.Contains(body, "too many self-service calls"):
			limited++
		default:
			t.Fatalf("mint %d = %d %q, want 200 or 429 saying why", i+1, code, body)
		}
	}
	if minted != burst || limited != 2*burst {
		t.Fatalf("%d tokens minted and %d calls refused, want %d and %d", minted, limited, burst, 2*burst)
	}
	in.mint("default/counter-2", "")

	// Connections held to counter-1's gateway, as its actor could open
	// them (the actor's own kept-alive one may hold a place too).
	dial := func(worker string) net.Conn {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := netns.DialContext(ctx, netns.SlotFor(worker).DialNetNSPath, "tcp", netns.GatewayAddr+":80")
		if err != nil {
			t.Fatalf("dial %s's gateway: %v", worker, err)
		}
		return c
	}
	var held []net.Conn
	for range maxConns {
		held = append(held, dial(w1))
	}
	over := dial(w1)
	_ = over.SetReadDeadline(time.Now().Add(3 * time.Second))
	answer, _ := io.ReadAll(over)
	over.Close()
	if !strings.HasPrefix(string(answer), "HTTP/1.1 503 ") || !strings.Contains(string(answer), "holds 4 connections") {
		t.Fatalf("a connection over the cap answered %q, want 503 saying the worker holds 4", answer)
	}
	in.mint("default/counter-2", "")
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "counter-1's gateway accepts again", 10*time.Second, func() bool {
		code, _ := gatewayPost(t, w1, "/v1/token")
		return code != http.StatusServiceUnavailable
	})

	// Log follows and watches, per caller: ate up's admin (the client
	// config's token) and e2e-admin (--token).
	for range 2 {
		out := in.ateBackground("logs", "actor", "counter-1", "-f")
		// A follow reads only once it holds its place.
		waitFor(t, "a log follow prints", 30*time.Second, func() bool { return out.String() != "" })
	}
	// Refused, it ends at once; admitted, it would run until killed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, ateBin, "get", "events", "-w")
	cmd.Dir, cmd.Env = repoDir, append(os.Environ(), "ATE_CONFIG="+filepath.Join(in.dataDir, "config.yaml"))
	b, err := cmd.CombinedOutput()
	if out := string(b); err == nil || ctx.Err() != nil || !strings.Contains(out, "already holds 2 watches and log follows") {
		t.Fatalf("a third stream of the same caller: %v (timed out: %v)\n%s\nwant RESOURCE_EXHAUSTED saying the caller holds 2", err, ctx.Err() != nil, out)
	}
	for range 2 {
		other := in.ateBackground("logs", "actor", "counter-2", "-f", "--token", adminToken)
		waitFor(t, "another user's log follow prints", 30*time.Second, func() bool { return other.String() != "" })
	}
}
