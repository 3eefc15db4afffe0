// Package netns creates, repairs and removes the per-worker network
// namespaces sandboxes run in, and dials into them.
//
// Each worker has two named namespaces, bind-mounted under /run/netns the
// way `ip netns add` makes them (so `ip netns exec` works for debugging):
//
//	inner  <name>    eth0 169.254.17.2/30 up, default via 169.254.17.1.
//	                 The sandbox joins it; runsc --network=sandbox takes
//	                 eth0 over (and its address off, see Reset).
//	outer  <name>-o  gw0 169.254.17.1/30 up, lo up. The host dials the
//	                 sandbox from here (DialContext).
//
// A veth pair joins eth0 and gw0. Every worker has the same addresses, each
// inside its own pair of namespaces, so nothing is routed on the host, no
// host routes clash between workers, and a checkpoint taken on one worker
// restores on any other (a restored sandbox keeps its addresses).
//
// All functions are safe for concurrent use. Changes to /run/netns are
// serialised, also across processes, by an flock on that directory; calls
// for one worker are expected to be serialised by the caller.
package netns

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"regexp"

	"github.com/vishvananda/netlink"
	vns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/sandbox"
)

const (
	// RunDir is where named network namespaces are bind-mounted, the
	// directory iproute2 uses.
	RunDir = "/run/netns"
	// OuterSuffix is appended to a worker's name to name its outer
	// namespace.
	OuterSuffix = "-o"
	// InnerIfName is the veth end inside the inner namespace, the only
	// interface the sandbox sees.
	InnerIfName = "eth0"
	// OuterIfName is the veth end inside the outer namespace. Namespaces
	// are private, so both names are fixed and never clash between workers.
	OuterIfName = "gw0"
	// GatewayAddr is the outer end's address and the sandbox's default
	// gateway.
	GatewayAddr = "169.254.17.1"
	// PrefixLen is the length of the /30 both ends live in.
	PrefixLen = 30
)

// ErrInvalidName is returned for a worker name that cannot name a namespace.
var ErrInvalidName = errors.New("invalid worker name")

// nameRE keeps names safe as file names under RunDir and short enough to
// read in `ip netns list`; 63 leaves room for OuterSuffix.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$`)

// SlotFor returns the slot paths Ensure uses for worker name, without
// touching the system.
func SlotFor(name string) sandbox.Slot {
	return sandbox.Slot{
		Name:          name,
		NetNSPath:     filepath.Join(RunDir, name),
		DialNetNSPath: filepath.Join(RunDir, name+OuterSuffix),
	}
}

// Ensure creates worker name's inner and outer namespaces and the veth pair
// between them, or repairs and reuses what already exists, and returns the
// slot. It is idempotent. Errors: ErrInvalidName, or a wrapped system error.
func Ensure(ctx context.Context, name string) (sandbox.Slot, error) {
	if !nameRE.MatchString(name) {
		return sandbox.Slot{}, fmt.Errorf("netns: %w: %q", ErrInvalidName, name)
	}
	slot := SlotFor(name)
	unlock, err := lockRunDir()
	if err != nil {
		return sandbox.Slot{}, err
	}
	defer unlock()
	for _, p := range []string{slot.NetNSPath, slot.DialNetNSPath} {
		if err := ctx.Err(); err != nil {
			return sandbox.Slot{}, fmt.Errorf("netns: ensure %s: %w", name, err)
		}
		if err := ensureNamed(p); err != nil {
			return sandbox.Slot{}, fmt.Errorf("netns: ensure %s: %w", name, err)
		}
	}
	if err := configure(ctx, slot); err != nil {
		return sandbox.Slot{}, fmt.Errorf("netns: ensure %s: %w", name, err)
	}
	return slot, nil
}

// Reset re-applies the interior address and default route (and the rest of
// the worker's wiring, recreating the veth pair if it is gone) in slot's
// existing namespaces. runsc takes the IPv4 address off eth0 when a sandbox
// starts and does not put it back, so call Reset before
// every run or restore, and never while a sandbox runs in the slot. It costs
// a few netlink round trips when everything is already correct. A missing
// namespace gives an error matching fs.ErrNotExist.
func Reset(ctx context.Context, slot sandbox.Slot) error {
	if err := configure(ctx, slot); err != nil {
		return fmt.Errorf("netns: reset %s: %w", slot.Name, err)
	}
	return nil
}

// Remove deletes slot's namespaces (the veth pair goes with them). It is
// idempotent. A sandbox still running in the slot keeps its namespace alive
// until it exits, but the names are free at once.
func Remove(ctx context.Context, slot sandbox.Slot) error {
	unlock, err := lockRunDir()
	if err != nil {
		return err
	}
	defer unlock()
	var errs []error
	for _, p := range []string{slot.NetNSPath, slot.DialNetNSPath} {
		if p == "" {
			continue
		}
		if err := removeNamed(p); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("netns: remove %s: %w", slot.Name, err)
	}
	return nil
}

// lockRunDir makes RunDir exist as a shared mount point, as iproute2 does
// (so namespaces mounted later show in mount namespaces copied earlier),
// and takes an exclusive flock on it. The returned func releases the lock.
func lockRunDir() (func(), error) {
	if err := os.MkdirAll(RunDir, 0o755); err != nil {
		return nil, fmt.Errorf("netns: %w", err)
	}
	fd, err := unix.Open(RunDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netns: open %s: %w", RunDir, err)
	}
	// flock is per inode; bind-mounting RunDir onto itself below keeps the
	// inode, so every locker agrees on the lock before and after.
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netns: lock %s: %w", RunDir, err)
	}
	unlock := func() { unix.Close(fd) } // closing drops the flock
	err = unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		err = unix.Mount(RunDir, RunDir, "none", unix.MS_BIND|unix.MS_REC, "")
		if err == nil {
			err = unix.Mount("", RunDir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		unlock()
		return nil, fmt.Errorf("netns: make %s a shared mount: %w", RunDir, err)
	}
	return unlock, nil
}

// isNetNS reports whether path is a mounted namespace file.
func isNetNS(path string) (bool, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("statfs %s: %w", path, err)
	}
	return st.Type == unix.NSFS_MAGIC, nil
}

// ensureNamed makes path a bind mount of a network namespace, creating a
// new empty namespace unless one is already mounted there.
func ensureNamed(path string) error {
	ok, err := isNetNS(path)
	if err != nil || ok {
		return err
	}
	// A plain file left by a crash between create and mount: start over.
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove stale %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDONLY, 0o444)
	if err != nil {
		return fmt.Errorf("create %s: %w", path, err)
	}
	f.Close()

	err = onMovedThread("a new namespace", func() error { return unix.Unshare(unix.CLONE_NEWNET) }, func() error {
		src := fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid())
		if err := unix.Mount(src, path, "none", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("bind %s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		os.Remove(path)
		return err
	}
	return nil
}

// removeNamed unmounts and deletes a namespace file; absent is fine.
func removeNamed(path string) error {
	err := unix.Unmount(path, unix.MNT_DETACH)
	if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	return nil
}

// openNS opens the namespace mounted at path. The caller closes it.
func openNS(path string) (vns.NsHandle, error) {
	ok, err := isNetNS(path)
	if err != nil {
		return vns.None(), err
	}
	if !ok {
		return vns.None(), fmt.Errorf("%s is not a network namespace: %w", path, fs.ErrNotExist)
	}
	h, err := vns.GetFromPath(path)
	if err != nil {
		return vns.None(), fmt.Errorf("open %s: %w", path, err)
	}
	return h, nil
}

// configure wires slot's existing namespaces: veth pair (recreated if
// either end is missing or they are not each other's peer), links up,
// addresses and the inner default route. Every step is a replace, so it is
// idempotent.
func configure(ctx context.Context, slot sandbox.Slot) error {
	innerNS, err := openNS(slot.NetNSPath)
	if err != nil {
		return err
	}
	defer innerNS.Close()
	outerNS, err := openNS(slot.DialNetNSPath)
	if err != nil {
		return err
	}
	defer outerNS.Close()

	// Handles hold netlink sockets opened inside each namespace; using
	// them never moves this goroutine's thread.
	inner, err := netlink.NewHandleAt(innerNS)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", slot.NetNSPath, err)
	}
	defer inner.Close()
	outer, err := netlink.NewHandleAt(outerNS)
	if err != nil {
		return fmt.Errorf("netlink in %s: %w", slot.DialNetNSPath, err)
	}
	defer outer.Close()

	if err := ctx.Err(); err != nil {
		return err
	}
	in, out, err := ensureVeth(inner, outer, innerNS)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	// Outer first: the inner default route needs its gateway on a link.
	if err := linkUp(outer, "lo"); err != nil {
		return err
	}
	if err := addrUp(outer, out, GatewayAddr); err != nil {
		return err
	}
	if err := linkUp(inner, "lo"); err != nil {
		return err
	}
	if err := addrUp(inner, in, sandbox.InteriorAddr); err != nil {
		return err
	}
	gw := net.ParseIP(GatewayAddr)
	route := &netlink.Route{LinkIndex: in.Attrs().Index, Gw: gw}
	if err := inner.RouteReplace(route); err != nil {
		return fmt.Errorf("default route via %s: %w", GatewayAddr, err)
	}
	return nil
}

// ensureVeth returns the inner and outer veth ends, creating the pair
// directly with its final names in the outer namespace (peer in the inner
// one), so no temporary host-namespace names are ever needed.
func ensureVeth(inner, outer *netlink.Handle, innerNS vns.NsHandle) (netlink.Link, netlink.Link, error) {
	in, inErr := inner.LinkByName(InnerIfName)
	out, outErr := outer.LinkByName(OuterIfName)
	if inErr == nil && outErr == nil && isPair(in, out) {
		return in, out, nil
	}
	// Deleting either end of a veth deletes both; "not found" is fine.
	if inErr == nil {
		if err := inner.LinkDel(in); err != nil && !isNotFound(err) {
			return nil, nil, fmt.Errorf("delete stale %s: %w", InnerIfName, err)
		}
	}
	if out, err := outer.LinkByName(OuterIfName); err == nil {
		if err := outer.LinkDel(out); err != nil && !isNotFound(err) {
			return nil, nil, fmt.Errorf("delete stale %s: %w", OuterIfName, err)
		}
	}
	veth := &netlink.Veth{
		LinkAttrs:     netlink.LinkAttrs{Name: OuterIfName},
		PeerName:      InnerIfName,
		PeerNamespace: netlink.NsFd(int(innerNS)),
	}
	if err := outer.LinkAdd(veth); err != nil {
		return nil, nil, fmt.Errorf("add veth %s/%s: %w", OuterIfName, InnerIfName, err)
	}
	in, err := inner.LinkByName(InnerIfName)
	if err != nil {
		return nil, nil, fmt.Errorf("find new %s: %w", InnerIfName, err)
	}
	out, err = outer.LinkByName(OuterIfName)
	if err != nil {
		return nil, nil, fmt.Errorf("find new %s: %w", OuterIfName, err)
	}
	return in, out, nil
}

// isPair reports whether in and out are veths naming each other as peer.
// Interface indexes are per namespace, so this is a sanity check against
// leftovers, not proof.
func isPair(in, out netlink.Link) bool {
	return in.Type() == "veth" && out.Type() == "veth" &&
		in.Attrs().ParentIndex == out.Attrs().Index &&
		out.Attrs().ParentIndex == in.Attrs().Index
}

func isNotFound(err error) bool {
	var nf netlink.LinkNotFoundError
	return errors.As(err, &nf) || errors.Is(err, unix.ENODEV) || errors.Is(err, unix.ENOENT)
}

// linkUp sets the named link up.
func linkUp(h *netlink.Handle, name string) error {
	l, err := h.LinkByName(name)
	if err != nil {
		return fmt.Errorf("find %s: %w", name, err)
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", name, err)
	}
	return nil
}

// addrUp sets l up and gives it ip/PrefixLen.
func addrUp(h *netlink.Handle, l netlink.Link, ip string) error {
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("set %s up: %w", l.Attrs().Name, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(ip).To4(), Mask: net.CIDRMask(PrefixLen, 32)}}
	if err := h.AddrReplace(l, a); err != nil {
		return fmt.Errorf("address %s/%d on %s: %w", ip, PrefixLen, l.Attrs().Name, err)
	}
	return nil
}
