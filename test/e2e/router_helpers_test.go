package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// counterTemplate creates template name running the counter example with
// its test endpoints (COUNTER_TEST_ENDPOINTS: /sleep, /log, /set-alarm…)
// and env, plus extra top-level template YAML (e.g. "idle: {after: 2s}"),
// and waits until its golden snapshot is READY.
func (in *installation) counterTemplate(name string, env map[string]string, extra string) {
	in.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\ncontainers:\n- name: counter\n  image: oci:%s\n  ports: [8080]\n",
		name, filepath.Join(repoDir, "build/images/counter"))
	b.WriteString("  env:\n    COUNTER_TEST_ENDPOINTS: \"1\"\n")
	for k, v := range env {
		fmt.Fprintf(&b, "    %s: %q\n", k, v)
	}
	// The counter keeps no secrets in memory: its new actors may restore
	// the golden snapshot, as examples/counter/template.yaml says.
	b.WriteString("newActors: golden\n")
	b.WriteString(extra)
	file := filepath.Join(in.t.TempDir(), name+".yaml")
	if err := os.WriteFile(file, []byte(b.String()), 0o600); err != nil {
		in.t.Fatal(err)
	}
	in.ate("create", "template", "-f", file)
	in.waitTemplateReady(name)
}

// pinnedCounterTemplate is counterTemplate with eviction: {evictable:
// false}: its actors keep their workers until the test frees them, so
// waiting requests cannot make room by evicting them.
func (in *installation) pinnedCounterTemplate(name string) {
	in.t.Helper()
	in.counterTemplate(name, nil, "eviction: {evictable: false}\n")
}

// suspend suspends actor name of the default atespace through the API.
func (in *installation) suspend(name string) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.client.SuspendActor(ctx, &atev1.SuspendActorRequest{Atespace: "default", Name: name}); err != nil {
		in.t.Fatalf("suspend %s: %v", name, err)
	}
}

// pause pauses actor name of the default atespace through the API.
func (in *installation) pause(name string) {
	in.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := in.client.PauseActor(ctx, &atev1.PauseActorRequest{Atespace: "default", Name: name}); err != nil {
		in.t.Fatalf("pause %s: %v", name, err)
	}
}

// parkedLogged counts the router's "request parked" log lines that report
// exactly n requests parked at once.
func (in *installation) parkedLogged(n int) int {
	re := regexp.MustCompile(`"msg":"request parked".*"parked":` + fmt.Sprint(n) + `[,}]`)
	return len(re.FindAllString(in.logText(), -1))
}

// routerURL is the router's base URL.
func (in *installation) routerURL() string { return "http://" + in.routerAddr }

// newRequest builds a request for actor ("<atespace>/<name>") through the
// router.
func (in *installation) newRequest(ctx context.Context, method, actor, path string, body io.Reader) *http.Request {
	in.t.Helper()
	req, err := http.NewRequestWithContext(ctx, method, in.routerURL()+path, body)
	if err != nil {
		in.t.Fatal(err)
	}
	req.Header.Set("Ate-Target-Actor", actor)
	return req
}

// wsConn is a client WebSocket opened by dialWS.
type wsConn struct{ c *websocket.Conn }

// Close closes the connection without a closing handshake.
func (ws *wsConn) Close() error { return ws.c.CloseNow() }

// dialWS opens a WebSocket to actor's /ws through the router.
func (in *installation) dialWS(actor string) (*wsConn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _, err := websocket.Dial(ctx, "ws://"+in.routerAddr+"/ws", &websocket.DialOptions{
		HTTPHeader: http.Header{"Ate-Target-Actor": {actor}, "Origin": {"http://localhost/"}},
	})
	if err != nil {
		return nil, err
	}
	return &wsConn{c: c}, nil
}

// wsEcho sends msg and checks it comes back within 30s.
func wsEcho(ws *wsConn, msg string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ws.c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
		return fmt.Errorf("send %q: %w", msg, err)
	}
	_, got, err := ws.c.Read(ctx)
	if err != nil {
		return fmt.Errorf("receive echo of %q: %w", msg, err)
	}
	if string(got) != msg {
		return fmt.Errorf("echo of %q came back as %q", msg, got)
	}
	return nil
}

// state reads the actor's state.
func (in *installation) state(name string) atev1.ActorState {
	in.t.Helper()
	return in.actor(name).GetState()
}

// elapsedAtLeast polls until d has passed since from: an observation
// window or a gap the scenario needs, not a wait for an event.
func elapsedAtLeast(t testing.TB, what string, from time.Time, d time.Duration) {
	t.Helper()
	waitFor(t, what, d+time.Second, func() bool { return time.Since(from) >= d })
}

// websocketReceive reads one message, without a deadline.
func websocketReceive(ws *wsConn, msg *string) error {
	_, b, err := ws.c.Read(context.Background())
	*msg = string(b)
	return err
}

// pid is the process id of `ate up`.
func (in *installation) pid() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cmd.Process.Pid
}
