package netns

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"go.uber.org/goleak"

	"substrate.dev/ate/internal/sandbox"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newWorker ensures a worker with a name unique to this run and removes it
// in cleanup, checking that nothing is left behind.
func newWorker(t *testing.T) sandbox.Slot {
	t.Helper()
	requireRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	name := "atet-" + hex.EncodeToString(b)
	slot, err := Ensure(t.Context(), name)
	if err != nil {
		t.Fatalf("Ensure(%s): %v", name, err)
	}
	t.Cleanup(func() {
		if err := Remove(context.Background(), slot); err != nil {
			t.Errorf("Remove(%s): %v", name, err)
		}
		for _, p := range []string{slot.NetNSPath, slot.DialNetNSPath} {
			if _, err := os.Stat(p); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("%s still exists after Remove (stat err %v)", p, err)
			}
		}
	})
	return slot
}

// requireRoot fails t unless it runs as root: the tests create real
// network namespaces, so they must not pass by skipping.
func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("netns tests need root (they create real network namespaces); run as root")
	}
}

// serve listens on InteriorAddr inside slot's inner namespace and answers
// every connection with reply and a newline.
func serve(t *testing.T, slot sandbox.Slot, reply string) int {
	t.Helper()
	var ln net.Listener
	err := inNetNS(slot.NetNSPath, func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(sandbox.InteriorAddr, "0"))
		return err
	})
	if err != nil {
		t.Fatalf("listen in %s: %v", slot.NetNSPath, err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte(reply + "\n"))
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return ln.Addr().(*net.TCPAddr).Port
}

// ask dials port on the interior address from slot's outer namespace and
// returns the first line it reads.
func ask(ctx context.Context, slot sandbox.Slot, port int) (string, error) {
	addr := net.JoinHostPort(sandbox.InteriorAddr, strconv.Itoa(port))
	c, err := DialContext(ctx, slot.DialNetNSPath, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	return strings.TrimSpace(line), err
}

// takeInnerAddrs removes and returns eth0's IPv4 addresses in slot's inner
// namespace.
func takeInnerAddrs(t *testing.T, slot sandbox.Slot) []string {
	t.Helper()
	ns, err := openNS(slot.NetNSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(InnerIfName)
	if err != nil {
		t.Fatal(err)
	}
	as, err := h.AddrList(l, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.IPNet.String())
		if err := h.AddrDel(l, &a); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func TestEnsureIsIdempotent(t *testing.T) {
	slot := newWorker(t)
	port := serve(t, slot, "hello")
	again, err := Ensure(t.Context(), slot.Name)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if again != slot {
		t.Fatalf("second Ensure = %+v, want %+v", again, slot)
	}
	// The namespace was reused, not replaced: the listener still answers.
	if got, err := ask(t.Context(), slot, port); err != nil || got != "hello" {
		t.Fatalf("after second Ensure: got %q, %v", got, err)
	}
}

func TestResetRestoresAddressTakenAway(t *testing.T) {
	slot := newWorker(t)
	port := serve(t, slot, "back")
	// Do what runsc does when a sandbox starts: take the address off.
	removed := takeInnerAddrs(t, slot)
	if len(removed) != 1 || removed[0] != sandbox.InteriorAddr+"/30" {
		t.Fatalf("inner addresses = %v, want [%s/30]", removed, sandbox.InteriorAddr)
	}
	if err := Reset(t.Context(), slot); err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if got, err := ask(t.Context(), slot, port); err != nil || got != "back" {
		t.Fatalf("after Reset: got %q, %v", got, err)
	}
}

func TestWorkersDoNotClash(t *testing.T) {
	a, b := newWorker(t), newWorker(t)
	pa, pb := serve(t, a, "a"), serve(t, b, "b")
	for _, tc := range []struct {
		slot sandbox.Slot
		port int
		want string
	}{{a, pa, "a"}, {b, pb, "b"}} {
		got, err := ask(t.Context(), tc.slot, tc.port)
		if err != nil || got != tc.want {
			t.Errorf("worker %s: got %q, %v; want %q", tc.slot.Name, got, err, tc.want)
		}
	}
}

func TestDialHonoursContext(t *testing.T) {
	slot := newWorker(t)
	port := serve(t, slot, "x")

	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := ask(ctx, slot, port); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled dial: err = %v, want context.Canceled", err)
	}

	// Without the inner address, ARP for it goes unanswered and a connect
	// would hang for seconds; the deadline must cut it short.
	takeInnerAddrs(t, slot)
	ctx, cancel = context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := ask(ctx, slot, port)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("dial past deadline: err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("dial took %v despite a 200ms deadline", d)
	}
}

func TestRemoveIsIdempotent(t *testing.T) {
	slot := newWorker(t)
	if err := Remove(t.Context(), slot); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	if err := Remove(t.Context(), slot); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if err := Reset(t.Context(), slot); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Reset after Remove: err = %v, want fs.ErrNotExist", err)
	}
	if _, err := DialContext(t.Context(), slot.DialNetNSPath, "tcp", "169.254.17.2:80"); err == nil {
		t.Fatal("DialContext into a removed namespace succeeded")
	}
}

func TestEnsureRejectsBadNames(t *testing.T) {
	for _, name := range []string{"", "../etc", "a/b", "-x", strings.Repeat("a", 64)} {
		if _, err := Ensure(t.Context(), name); !errors.Is(err, ErrInvalidName) {
			t.Errorf("Ensure(%q): err = %v, want ErrInvalidName", name, err)
		}
	}
}

func TestDialRejectsHostNames(t *testing.T) {
	if _, err := DialContext(t.Context(), "/nonexistent", "tcp", "localhost:80"); err == nil {
		t.Fatal("DialContext accepted a host name")
	}
}

func TestEnsureRepairsMissingVeth(t *testing.T) {
	slot := newWorker(t)
	ns, err := openNS(slot.DialNetNSPath)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.LinkByName(OuterIfName)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.LinkDel(l); err != nil {
		t.Fatal(err)
	}
	if _, err := Ensure(t.Context(), slot.Name); err != nil {
		t.Fatalf("Ensure after losing the veth: %v", err)
	}
	port := serve(t, slot, "repaired")
	if got, err := ask(t.Context(), slot, port); err != nil || got != "repaired" {
		t.Fatalf("after repair: got %q, %v", got, err)
	}
}

// TestEnsureNamedLeavesProcessNamespace creates namespaces and checks that
// the process's network namespace (/proc/self/ns/net, the main thread's)
// never changes. It did after the first one when the unsharing goroutine
// ran on the main thread and exited locked: Go wedges the main thread in
// place rather than ending it.
func TestEnsureNamedLeavesProcessNamespace(t *testing.T) {
	requireRoot(t)
	before, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i := range 64 {
		p := filepath.Join(dir, strconv.Itoa(i))
		if err := ensureNamed(p); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := removeNamed(p); err != nil {
				t.Error(err)
			}
		})
		if now, err := os.Readlink("/proc/self/ns/net"); now != before {
			t.Fatalf("after %d namespaces the process's namespace is %s (%v), was %s", i+1, now, err, before)
		}
	}
}
