package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/testlog"
)

// ateBackground runs a CLI command that streams (-f, -w) until the test
// ends, and returns its stdout and stderr as they grow.
func (in *installation) ateBackground(args ...string) *testlog.Buffer {
	in.t.Helper()
	var out testlog.Buffer
	cmd := exec.Command(ateBin, args...)
	cmd.Dir = repoDir
	cmd.Env = append(os.Environ(), "ATE_CONFIG="+filepath.Join(in.dataDir, "config.yaml"))
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		in.t.Fatal(err)
	}
	in.t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if in.t.Failed() {
			in.t.Logf("ate %s output:\n%s", strings.Join(args, " "), out.String())
		}
	})
	return &out
}

// breakSnapshot overwrites the actor's durable checkpoint image with
// garbage of the same size (the snapshot store reads it back whole and
// it fails inside runsc restore) and returns a func that puts the good
// image back. The store may keep the image zstd-compressed
// (snapshot.LocalOptions): then the garbage is compressed too and the
// manifest's stored size follows, so the store's own checks pass.
func (in *installation) breakSnapshot(actor string) (fix func()) {
	in.t.Helper()
	dir := filepath.Join(in.dataDir, "snapshots", snapshot.Bare(in.actor(actor).GetSnapshot()))
	manifest := filepath.Join(dir, snapshot.ManifestName)
	goodManifest, err := os.ReadFile(manifest)
	if err != nil {
		in.t.Fatalf("read snapshot manifest: %v", err)
	}
	var m snapshot.Manifest
	if err := json.Unmarshal(goodManifest, &m); err != nil {
		in.t.Fatal(err)
	}
	i := slices.IndexFunc(m.Files, func(f snapshot.File) bool { return f.Name == "checkpoint.img" })
	if i < 0 {
		in.t.Fatalf("snapshot %s has no checkpoint.img: %+v", dir, m.Files)
	}
	bad := make([]byte, m.Files[i].Size)
	for j := range bad {
		bad[j] = byte(j * 7)
	}
	img := filepath.Join(dir, "checkpoint.img")
	if m.Files[i].Compression == snapshot.CompressionZstd {
		img += snapshot.ZstdSuffix
		enc, err := zstd.NewWriter(nil)
		if err != nil {
			in.t.Fatal(err)
		}
		bad = enc.EncodeAll(bad, nil)
		m.Files[i].StoredSize = int64(len(bad))
		data, err := json.Marshal(m)
		if err != nil {
			in.t.Fatal(err)
		}
		if err := os.WriteFile(manifest, data, 0o600); err != nil {
			in.t.Fatal(err)
		}
	}
	good, err := os.ReadFile(img)
	if err != nil {
		in.t.Fatalf("read snapshot file: %v", err)
	}
	if err := os.WriteFile(img, bad, 0o600); err != nil {
		in.t.Fatal(err)
	}
	return func() {
		in.t.Helper()
		if err := os.WriteFile(img, good, 0o600); err != nil {
			in.t.Fatal(err)
		}
		if err := os.WriteFile(manifest, goodManifest, 0o600); err != nil {
			in.t.Fatal(err)
		}
	}
}

// logLine POSTs text to the counter actor's /log, which prints it.
func (in *installation) logLine(actor, text string) {
	in.t.Helper()
	if code, body := in.do(http.MethodPost, actor, "/log", text); code != http.StatusOK {
		in.t.Fatalf("POST /log to %s = %d %q", actor, code, body)
	}
}

// TestActorLogsFollowAcrossMove follows an actor's log with `ate logs -f`
// while it runs on one worker, is suspended, and resumes on another:
// every line it printed arrives once, in order, with the suspend and
// resume marked between them and naming both workers.
func TestActorLogsFollowAcrossMove(t *testing.T) {
	in := startUp(t, 2, "--demo")
	for _, name := range []string{"counter-2", "counter-3"} {
		in.ate("create", "actor", name, "--template", "counter")
	}
	follow := in.ateBackground("logs", "actor", "counter-1", "-f")

	in.ate("resume", "actor", "counter-1")
	first := in.actor("counter-1").GetWorker()
	for i := 1; i <= 5; i++ {
		in.logLine("default/counter-1", fmt.Sprintf("before-%d", i))
	}
	// Move counter-1 to the other worker: counter-2 holds it, counter-3
	// takes counter-1's old one, then counter-2 makes room.
	in.ate("resume", "actor", "counter-2")
	in.ate("suspend", "actor", "counter-1")
	in.ate("resume", "actor", "counter-3")
	in.ate("suspend", "actor", "counter-2")
	in.ate("resume", "actor", "counter-1")
	second := in.actor("counter-1").GetWorker()
	if second == first || second == "" {
		t.Fatalf("counter-1 resumed on worker %q, want another than %q", second, first)
	}
	for i := 1; i <= 5; i++ {
		in.logLine("default/counter-1", fmt.Sprintf("after-%d", i))
	}
	waitFor(t, "the follower to print after-5", 30*time.Second, func() bool {
		return strings.Contains(follow.String(), "after-5\n")
	})

	mine := regexp.MustCompile(`^(before|after)-\d$`)
	var got, want []string
	for l := range strings.Lines(follow.String()) {
		l = strings.TrimSuffix(l, "\n")
		switch {
		case mine.MatchString(l):
			got = append(got, l)
		case strings.HasPrefix(l, "--- ate: suspended on worker "+first+" "):
			got = append(got, "suspended on first")
		case strings.HasPrefix(l, "--- ate: resumed on worker "+second+" "):
			got = append(got, "resumed on second")
		}
	}
	for i := 1; i <= 5; i++ {
		want = append(want, fmt.Sprintf("before-%d", i))
	}
	want = append(want, "suspended on first", "resumed on second")
	for i := 1; i <= 5; i++ {
		want = append(want, fmt.Sprintf("after-%d", i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("ate logs -f printed (of the lines the test wrote and the markers of the move)\n%q\nwant\n%q", got, want)
	}

	// Without -f: the whole log at once; --tail keeps the last lines.
	if out := in.ate("logs", "actor", "counter-1", "--tail", "2"); out != "after-4\nafter-5\n" {
		t.Fatalf("ate logs --tail 2 = %q, want the last two lines", out)
	}
	if out := in.ate("logs", "actor", "counter-1"); !strings.Contains(out, "before-1\n") || !strings.Contains(out, "after-5\n") {
		t.Fatalf("ate logs printed\n%s\nwant both runs' lines", out)
	}
	// --since: every line was written in the last few minutes.
	if out := in.ate("logs", "actor", "counter-1", "--since", "10m"); !strings.Contains(out, "before-1\n") {
		t.Fatalf("ate logs --since 10m printed\n%s\nwant the lines of the last minutes", out)
	}

	// Bad input: clear messages, the right codes.
	if out, err := in.ateErr("logs", "actor", "nosuch"); err == nil || !strings.Contains(out, "not found") {
		t.Fatalf("ate logs of an unknown actor = %v %q, want a not-found error", err, out)
	}
	if out, err := in.ateErr("logs", "actor", "counter-1", "--tail", "-1"); err == nil || !strings.Contains(out, "--tail") {
		t.Fatalf("ate logs --tail -1 = %v %q, want an error naming --tail", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, req := range []*atev1.ActorLogsRequest{
		{Atespace: "default", Name: "counter-1", Tail: -1},
		{Atespace: "default", Name: "counter-1", SinceSeconds: -5},
		{Atespace: "default", Name: "Not_A_Name"},
	} {
		stream, err := in.client.ActorLogs(ctx, req)
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument {
			t.Errorf("ActorLogs(%v) = %v, want InvalidArgument", req, err)
		}
	}
	stream, err := in.client.ActorLogs(ctx, &atev1.ActorLogsRequest{Atespace: "default", Name: "nosuch"})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.NotFound {
		t.Errorf("ActorLogs of an unknown actor = %v, want NotFound", err)
	}
}

// event is what the test reads of `ate get events -o json`.
type event struct {
	Type      string `json:"type"`
	FromState string `json:"fromState"`
	ToState   string `json:"toState"`
	Message   string `json:"message"`
	Worker    string `json:"worker"`
}

// TestEventsAndWatch: a resume, a suspend and a failed restore leave
// their events, with the failure's message; `ate get events -w` delivers
// the failure as it happens, and `ate get actor -w` prints every state
// the actor passed through.
func TestEventsAndWatch(t *testing.T) {
	in := startUp(t, 2, "--demo")
	events := in.ateBackground("get", "events", "--actor", "counter-1", "-w", "-o", "json")
	watch := in.ateBackground("get", "actor", "counter-1", "-w", "-o", "json")
	// The actor watch prints the actor as it reads it first: wait for
	// that, so what follows is seen as changes.
	waitFor(t, "ate get actor -w to print the actor", 10*time.Second, func() bool {
		return strings.Contains(watch.String(), "SUSPENDED")
	})

	in.mustCount("default/counter-1", 1)
	in.ate("suspend", "actor", "counter-1")
	in.breakSnapshot("counter-1")
	if code, _, _, err := in.request(http.MethodGet, "default/counter-1", "/", ""); err != nil || code < 500 {
		t.Fatalf("request with a broken snapshot = %d, %v; want a 5xx", code, err)
	}

	// The list: each transition once, in order, the failure a Warning
	// with its message.
	var list struct{ Items []event }
	waitFor(t, "the failed restore's event", 10*time.Second, func() bool {
		list.Items = nil
		if err := json.Unmarshal([]byte(in.ate("get", "events", "--actor", "counter-1", "-o", "json")), &list); err != nil {
			t.Fatal(err)
		}
		return len(list.Items) > 0 && list.Items[len(list.Items)-1].FromState == "RESUMING" && list.Items[len(list.Items)-1].ToState == "SUSPENDED"
	})
	var steps []string
	for _, e := range list.Items {
		steps = append(steps, e.FromState+">"+e.ToState)
	}
	wantSteps := []string{"SUSPENDED>RESUMING", "RESUMING>RUNNING", "RUNNING>SUSPENDING", "SUSPENDING>SUSPENDED", "SUSPENDED>RESUMING", "RESUMING>SUSPENDED"}
	if !slices.Equal(steps, wantSteps) {
		t.Fatalf("events of counter-1: %v, want %v", steps, wantSteps)
	}
	failed := list.Items[len(list.Items)-1]
	if failed.Type != "Warning" || !strings.Contains(failed.Message, "resume failed") || failed.Worker == "" {
		t.Fatalf("failed restore's event = %+v, want a Warning with the failure's message and the worker", failed)
	}
	if list.Items[1].Type != "Normal" {
		t.Fatalf("resume's event = %+v, want Normal", list.Items[1])
	}

	// The watcher got the same events as they happened, the failure last.
	waitFor(t, "ate get events -w to print the failure", 10*time.Second, func() bool {
		return strings.Contains(events.String(), "resume failed")
	})
	var watched []string
	for l := range strings.Lines(events.String()) {
		var e event
		if json.Unmarshal([]byte(l), &e) == nil && e.ToState != "" {
			watched = append(watched, e.FromState+">"+e.ToState)
		}
	}
	if !slices.Equal(watched, wantSteps) {
		t.Fatalf("ate get events -w printed %v, want %v", watched, wantSteps)
	}

	// ate get actor -w: the actor as first read, then each state.
	waitFor(t, "ate get actor -w to print the rollback", 10*time.Second, func() bool {
		return strings.Count(watch.String(), "resume failed") > 0
	})
	var states []string
	for l := range strings.Lines(watch.String()) {
		var a struct{ State string }
		if json.Unmarshal([]byte(l), &a) == nil && a.State != "" {
			states = append(states, a.State)
		}
	}
	wantStates := []string{"SUSPENDED", "RESUMING", "RUNNING", "SUSPENDING", "SUSPENDED", "RESUMING", "SUSPENDED"}
	if !slices.Equal(states, wantStates) {
		t.Fatalf("ate get actor -w printed states %v, want %v", states, wantStates)
	}

	// Bad input.
	if out, err := in.ateErr("get", "events", "--limit", "0"); err == nil || !strings.Contains(out, "--limit") {
		t.Fatalf("ate get events --limit 0 = %v %q, want an error naming --limit", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := in.client.ListEvents(ctx, &atev1.ListEventsRequest{Actor: "counter-1"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListEvents without atespace = %v, want InvalidArgument", err)
	}
	if _, err := in.client.ListEvents(ctx, &atev1.ListEventsRequest{Limit: 100001}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("ListEvents with limit 100001 = %v, want InvalidArgument", err)
	}
}

// TestClusterActorLogsAcrossNodes: with an API server and two nodes as
// separate processes, `ate logs -f` follows an actor from one node to the
// other: the API server reads each node's part of the log over the node
// protocol and puts them in order.
func TestClusterActorLogsAcrossNodes(t *testing.T) {
	c := startCluster(t, "node-a", "node-b")
	c.counterActor()
	for _, name := range []string{"counter-2", "counter-3"} {
		c.in.ate("create", "actor", name, "--template", "counter")
	}
	follow := c.in.ateBackground("logs", "actor", "counter-1", "-f")
	first := c.nodeOf("counter-1")
	c.in.logLine("default/counter-1", "on-first")
	// Each node has one worker: counter-2 takes the other node's,
	// counter-3 the first's once counter-1 leaves it, and counter-2
	// makes room for counter-1 on the other node.
	c.in.ate("resume", "actor", "counter-2")
	c.in.ate("suspend", "actor", "counter-1")
	c.in.ate("resume", "actor", "counter-3")
	c.in.ate("suspend", "actor", "counter-2")
	c.in.ate("resume", "actor", "counter-1")
	second := c.nodeOf("counter-1")
	if second != other(first) {
		t.Fatalf("counter-1 resumed on node %q, want %s", second, other(first))
	}
	c.in.logLine("default/counter-1", "on-second")
	waitFor(t, "the follower to print on-second", 30*time.Second, func() bool {
		return strings.Contains(follow.String(), "on-second\n")
	})
	var got []string
	for l := range strings.Lines(follow.String()) {
		l = strings.TrimSuffix(l, "\n")
		switch {
		case l == "on-first" || l == "on-second":
			got = append(got, l)
		case strings.HasPrefix(l, "--- ate: suspended on worker ") && strings.HasSuffix(l, " of node "+first):
			got = append(got, "suspended on "+first)
		case strings.HasPrefix(l, "--- ate: resumed on worker ") && strings.Contains(l, " of node "+second+" "):
			got = append(got, "resumed on "+second)
		}
	}
	want := []string{"on-first", "suspended on " + first, "resumed on " + second, "on-second"}
	if !slices.Equal(got, want) {
		t.Fatalf("ate logs -f across nodes printed %q, want %q\n%s", got, want, follow.String())
	}
}
