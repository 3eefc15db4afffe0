package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/ateconfig"
)

// chromiumPath is Debian's Chromium, installed by hack/install-chromium.sh.
const chromiumPath = "/usr/bin/chromium"

// domTimeout bounds each wait on the page: a state change reaches the DOM
// within the script's refresh interval (2 s) once the API has it.
const domTimeout = 30 * time.Second

// TestDashboard drives the web dashboard of `ate up --demo` in a real
// headless Chromium: the page loads with no console error or uncaught
// exception and lists the demo actor RUNNING; its Suspend button makes
// the API say SUSPENDED and the page follow; a request through the
// router brings it back and the page shows RUNNING again, with the
// activation on the latency chart; a Delete the API refuses (the actor
// runs) shows the API's reason on the page. Screenshots go to
// $ATE_TEST_ARTIFACTS if set, else to the test's artifact directory
// (kept with `go test -artifacts -outputdir DIR`).
func TestDashboard(t *testing.T) {
	if _, err := os.Stat(chromiumPath); err != nil {
		t.Fatalf("Chromium missing (%v): run `bash hack/install-chromium.sh` (or `make test`)", err)
	}
	in := startUp(t, 2, "--demo")
	if in.dashboardURL == "" {
		t.Fatal(`the "ate up ready" record names no dashboard URL`)
	}
	if !strings.Contains(in.logText(), "Dashboard: "+in.dashboardURL+"\n") {
		t.Errorf("ate up did not print the dashboard's URL %s", in.dashboardURL)
	}
	const actor = "default/counter-1"
	in.mustCount(actor, 1)

	b := newBrowser(t)
	if err := chromedp.Do(b.ctx, chromedp.Navigate(in.dashboardURL)); err != nil {
		t.Fatalf("open %s: %v", in.dashboardURL, err)
	}
	// The dashboard asks for a token first (the admin token ate up wrote
	// into the client config) and acts with it.
	cfg, err := ateconfig.Load(filepath.Join(in.dataDir, "config.yaml"))
	if err != nil || cfg.Token == "" {
		t.Fatalf("client config: %+v, %v; want a token", cfg, err)
	}
	for _, step := range []chromedp.Action[chromedp.Void]{
		chromedp.WaitVisible(chromedp.CSS(`#token`)),
		chromedp.SendKeys(chromedp.CSS(`#token`), cfg.Token),
		chromedp.Click(chromedp.CSS(`#login-submit`)),
		// The form posts and is redirected to the page: wait for that
		// navigation to end (queries survive it; a JavaScript poll
		// started before it is cut off with "Inspected target
		// navigated or closed").
		chromedp.WaitNotPresent(chromedp.CSS(`#token`)),
		chromedp.WaitReady(chromedp.CSS(`#latency`)),
	} {
		if err := chromedp.Do(b.ctx, step); err != nil {
			t.Fatalf("sign in: %v", err)
		}
	}
	b.waitState(actor, "RUNNING")

	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`tr[data-actor="`+actor+`"] button[data-action="suspend"]`))); err != nil {
		t.Fatalf("click Suspend: %v", err)
	}
	waitFor(t, "the API to say counter-1 is SUSPENDED", domTimeout, func() bool {
		return in.actor("counter-1").GetState() == atev1.ActorState_SUSPENDED
	})
	b.waitState(actor, "SUSPENDED")

	// A request through the router resumes it; the page follows without
	// a reload.
	in.mustCount(actor, 2)
	b.waitState(actor, "RUNNING")
	b.waitTrue("the activation on the latency chart", `document.querySelectorAll("#latency polyline.p50").length > 0`)
	b.waitTrue("the demo template READY with its golden snapshot",
		`document.querySelector('tr[data-template="default/counter"] .state').textContent.trim() === "READY"`)
	b.waitTrue("the suspend among the recent events (ListEvents)", `[...document.querySelectorAll("#events tbody tr")].some(r =>
		r.cells[1].textContent.trim() === "SUSPENDED" && r.cells[2].textContent.trim() === "`+actor+`")`)
	b.waitTrue("the workers and the node", `document.querySelectorAll("tr[data-worker]").length === 2 && !!document.querySelector('tr[data-node="local"]')`)
	if msgs := b.consoleErrors(); len(msgs) > 0 {
		t.Errorf("the page logged errors:\n  %s", strings.Join(msgs, "\n  "))
	}
	b.screenshot("dashboard.png")

	// Delete without --force is refused for a RUNNING actor: the page
	// shows the API's reason, and the actor stays. (The browser logs the
	// refusal's 409 itself, so console errors are checked above.)
	if err := chromedp.Do(b.ctx, chromedp.Click(chromedp.CSS(`tr[data-actor="`+actor+`"] button[data-action="delete"]`))); err != nil {
		t.Fatalf("click Delete: %v", err)
	}
	b.waitTrue("the refusal on the page",
		`!document.getElementById("error").hidden && document.getElementById("error-text").textContent.startsWith("delete `+actor+`: ")`)
	if st := in.actor("counter-1").GetState(); st != atev1.ActorState_RUNNING {
		t.Errorf("after a refused delete counter-1 is %s, want RUNNING", st)
	}
	b.screenshot("dashboard-refused.png")
}

// browser is one headless Chromium tab with its console collected.
type browser struct {
	t   *testing.T
	ctx context.Context
	dir string // where screenshots go

	mu sync.Mutex
	// errors are console errors, browser log errors and uncaught
	// exceptions, as "type: text (url:line)".
	errors []string
}

// newBrowser starts Chromium with the flags this machine needs (no
// sandbox: tests run as root) and a fresh profile; it stops with the
// test.
func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromiumPath),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1400, 1000),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx, dir: artifactDir(t)}

	// Subscribed before the first navigation, so nothing is missed.
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.errors = append(b.errors, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				b.mu.Unlock()
			}
		}
	}()
	// The Delete button asks for confirmation: accept it.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for _, err := range dialogs {
			if err != nil {
				return
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.errors...)
}

// waitState waits until the page's row of actor shows state.
func (b *browser) waitState(actor, state string) {
	b.t.Helper()
	b.waitTrue(fmt.Sprintf("the page to show %s %s", actor, state), fmt.Sprintf(
		`(document.querySelector('tr[data-actor=%q] td.state') || {textContent: ""}).textContent.trim() === %q`, actor, state))
}

// waitTrue waits until the JavaScript expression is truthy on the page,
// failing the test after domTimeout with what was awaited.
func (b *browser) waitTrue(what, expr string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, domTimeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(domTimeout))); err != nil {
		b.screenshot("dashboard-failed.png")
		b.t.Fatalf("waiting for %s: %v", what, err)
	}
}

// screenshot writes the whole page as a PNG to the artifact directory.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot: %v", err)
		return
	}
	p := filepath.Join(b.dir, name)
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot: %v", err)
		return
	}
	b.t.Logf("screenshot: %s", p)
}

// artifactDir is $ATE_TEST_ARTIFACTS/<test name> if that is set, else the
// test's artifact directory.
func artifactDir(t *testing.T) string {
	root := os.Getenv("ATE_TEST_ARTIFACTS")
	if root == "" {
		return t.ArtifactDir()
	}
	dir := filepath.Join(root, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}
