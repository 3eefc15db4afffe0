package node

import (
	"sync"

	"substrate.dev/ate/internal/actorlog"
	"substrate.dev/ate/internal/egress"

	"substrate.dev/ate/internal/sandbox"
)

// slot is one worker (or the golden-build slot). opMu serialises sandbox
// operations on it: every start, checkpoint, stop, standby refill and
// exit clean-up holds it throughout. The rest of the slot's state is
// split by owner, each part with its own lock, held only briefly and
// never while taking another part's:
//
//   - mu guards the container the slot runs (below);
//   - gate is the tunnel's admission and activity bookkeeping
//     (admission.go), so the tunnel never waits behind a checkpoint;
//   - standby is the prepared container and the template it is for
//     (standby.go);
//   - files are the identity, restore notification and log files kept
//     open across starts (identity.go), guarded by opMu.
//
// Lock order: opMu, then any one of mu, gate.mu, standby.mu.
type slot struct {
	name string
	sb   sandbox.Slot

	opMu sync.Mutex

	mu          sync.Mutex
	containerID string
	volumes     []volume
	// stopping is set while a checkpoint or stop ends the container on
	// purpose, so the exit watcher does not report it as a crash.
	stopping bool
	// execs are the processes `ate exec` runs in the container now, each
	// by the function that ends it (exec.go); execsClosed refuses new
	// ones once endExecs ran, until the next container. execWG counts
	// them.
	execs       map[*execEntry]struct{}
	execsClosed bool
	execWG      sync.WaitGroup

	gate    gate
	standby standbySlot
	files   workerFiles
	// egress relays the sandbox's allowed outbound connections
	// (egress.go); nil for slots without namespaces. Its allow-list is
	// set by each start and cleared by clearOp, under opMu; the nftables
	// table is replaced by the next start whose rules differ.
	egress *egress.Proxy
	// egressRules is the allow-list the worker's nftables table holds
	// (egress.Allowed.Key): "" for deny-all, "\x00" when unknown (an
	// Apply failed midway). Guarded by opMu.
	egressRules string

	// capture copies the output of the actor s runs into its actor log
	// (actorlogs.go); stopWhy is the reason its stop marker line gives.
	// Both guarded by opMu.
	capture *actorlog.Capture
	stopWhy string

	// leftovers are containers whose destroy failed; while any remains
	// the worker hosts nothing (Node.destroy). Guarded by opMu.
	leftovers []string
}

// running records that container id, with volumes vols, is starting or
// runs in s. s.opMu must be held.
func (s *slot) running(id string, vols []volume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containerID, s.volumes = id, vols
	s.execsClosed = false
}

// stop marks s's container as ended on purpose and returns it (empty when
// none) and its volumes. s.opMu must be held.
func (s *slot) stop() (id string, vols []volume) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopping = true
	return s.containerID, s.volumes
}

// gone records that s's container no longer exists (a checkpoint deleted
// it), so a later clean-up does not destroy it again. s.opMu must be held.
func (s *slot) gone() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containerID = ""
}

// cleared records that s runs nothing. s.opMu must be held.
func (s *slot) cleared() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.containerID, s.volumes, s.stopping = "", nil, false
}

// busy reports whether s runs a container.
func (s *slot) busy() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.containerID != ""
}

// runs reports whether s runs container id.
func (s *slot) runs(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.containerID == id
}

// diedOnItsOwn reports whether container id still runs in s as far as s
// knows, and nobody is ending it on purpose: if it exited, it crashed.
func (s *slot) diedOnItsOwn(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.containerID == id && !s.stopping
}
