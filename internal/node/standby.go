package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/sandbox"
	"substrate.dev/ate/internal/snapshot"
)

// A standby is a container prepared ahead of time on a free worker
// (sandbox.Preparer; `runsc create` for gVisor): its sandbox, file server
// and network already run, so the next start of an actor of the same
// template on that worker only restores (or starts) into it. That halves
// a restore (BENCHMARKS.md, Activation latency: BenchmarkRestore/default
// vs /prepared), which is what brings a paused actor's activation under
// the target of issue 5.
//
// Which template a free worker prepares for is the one it hosted last
// (a golden build offers its template to workers that have hosted none):
// the best guess without a forecast, and right whenever one template
// dominates. A standby that does not fit the next start is destroyed
// first, so a wrong guess costs only the destroy. A standby holds
// a worker's sandbox slot but no actor; the worker stays FREE in the
// store.

// standbyTemplate is what a worker prepares its standby for.
type standbyTemplate struct {
	spec        *atev1.ActorTemplateSpec
	imageDigest string
	// atespace is whose registry credentials pull the image if it is not
	// unpacked; not part of key (a digest is the same content for all).
	atespace string
}

// key identifies t's spec and image: equal keys, equal containers.
// Deterministic encoding makes equal specs encode alike.
func (t *standbyTemplate) key() string {
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(t.spec)
	return t.imageDigest + "\x00" + string(b)
}

// standbySlot is one worker's standby: the container prepared for its
// next start, if any, and the template it prepares standbys for. Its own
// mutex guards it; the container itself is created and destroyed under
// the slot's opMu.
type standbySlot struct {
	mu sync.Mutex
	// spec is the prepared container, nil when none; key is the
	// template key it is indexed under in standbys.ready.
	spec *sandbox.Spec
	key  string
	// template is what the worker prepares standbys for: the one it
	// hosted last, or the one a golden build offered; nil when neither.
	template *standbyTemplate
}

// current returns the template the worker prepares standbys for.
func (sb *standbySlot) current() *standbyTemplate {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.template
}

// hosted records that the worker now hosts an actor of t: its next
// standby will be for t.
func (sb *standbySlot) hosted(t *standbyTemplate) {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	sb.template = t
}

// offer makes t the worker's template if it has none; it reports whether
// it did.
func (sb *standbySlot) offer(t *standbyTemplate) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	if sb.template != nil {
		return false
	}
	sb.template = t
	return true
}

// standbys is the node's standby bookkeeping: whether standbys are
// prepared at all, and which free workers hold one for which template.
// Safe for concurrent use.
type standbys struct {
	// prep prepares containers; nil when the runtime cannot.
	prep sandbox.Preparer
	// off is set by Config.NoStandbys, StopStandbys and Shutdown.
	off atomic.Bool
	// ready is the workers holding a standby, by template key.
	ready keyedSet[string]
	// readied gets a signal (never blocking) whenever a standby becomes
	// ready: the node's viewChanged.
	readied chan<- struct{}

	// Starts under way (startBegan, startEnded), for deferred refills
	// (afterStarts).
	startsMu sync.Mutex
	starts   int
	// ended counts starts that ended; endedCh is closed and replaced
	// whenever one does.
	ended   uint64
	endedCh chan struct{}
}

// startBegan records a start under way; startEnded its end.
func (st *standbys) startBegan() {
	st.startsMu.Lock()
	st.starts++
	st.startsMu.Unlock()
}

func (st *standbys) startEnded() {
	st.startsMu.Lock()
	defer st.startsMu.Unlock()
	st.starts--
	st.ended++
	close(st.endedChLocked())
	st.endedCh = make(chan struct{})
}

// endedChLocked is the channel the next start's end closes; startsMu is
// held.
func (st *standbys) endedChLocked() chan struct{} {
	if st.endedCh == nil {
		st.endedCh = make(chan struct{})
	}
	return st.endedCh
}

// startsEnded is how many starts have ended so far, for afterStarts.
func (st *standbys) startsEnded() uint64 {
	st.startsMu.Lock()
	defer st.startsMu.Unlock()
	return st.ended
}

// afterStarts returns once no start is under way and either one ended
// since startsEnded returned from, or grace passed with none ending: the
// resume that follows the suspend (or pause) that freed a worker has
// restored, or did not come. It returns early when done closes, when
// still (asked whenever a start ends) reports the wait is no longer
// wanted, and at the latest after most, so that starts that never pause
// (steady load) do not keep a worker without a standby.
func (st *standbys) afterStarts(done <-chan struct{}, from uint64, grace, most time.Duration, still func() bool) {
	timer, bound := time.NewTimer(grace), time.NewTimer(most)
	defer timer.Stop()
	defer bound.Stop()
	expired, seen := timer.C, from
	for waited := false; ; {
		st.startsMu.Lock()
		busy, ended, ch := st.starts > 0, st.ended, st.endedChLocked()
		st.startsMu.Unlock()
		if ended > seen {
			seen = ended
			if !still() {
				return
			}
		}
		if !busy && (ended > from || waited) {
			return
		}
		select {
		case <-ch:
		case <-expired:
			waited, expired = true, nil
		case <-bound.C:
			return
		case <-done:
			return
		}
	}
}

func (st *standbys) init(rt sandbox.Runtime, off bool, readied chan<- struct{}) {
	st.prep, _ = rt.(sandbox.Preparer)
	st.off.Store(off)
	st.readied = readied
}

// enabled reports whether free workers should prepare standbys.
func (st *standbys) enabled() bool { return st.prep != nil && !st.off.Load() }

// set records sb (nil: none), prepared for the template with key, as
// worker's standby in slot, and indexes it in ready.
func (st *standbys) set(worker string, slot *standbySlot, sb *sandbox.Spec, key string) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.spec != nil {
		st.ready.remove(slot.key, worker)
	}
	slot.spec, slot.key = sb, key
	if sb != nil {
		st.ready.add(key, worker)
		signal(st.readied)
	}
}

// take forgets worker's standby and returns it, nil when none.
func (st *standbys) take(worker string, slot *standbySlot) *sandbox.Spec {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	sb := slot.spec
	if sb != nil {
		st.ready.remove(slot.key, worker)
	}
	slot.spec, slot.key = nil, ""
	return sb
}

// held reports whether slot holds a standby.
func (sb *standbySlot) held() bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.spec != nil
}

// refillTimeout bounds one standby preparation.
const refillTimeout = 30 * time.Second

// takeStandby returns s's standby if it was prepared for want (equal but
// for ID and BundleDir) and forgets it either way; one that does not fit
// is destroyed. s.opMu must be held.
func (n *Node) takeStandby(ctx context.Context, s *slot, want sandbox.Spec) *sandbox.Spec {
	sb := n.standbys.take(s.name, &s.standby)
	if sb == nil {
		return nil
	}
	if !sameContainer(*sb, want) {
		n.destroy(ctx, s, sb.ID)
		return nil
	}
	return sb
}

// StandbyKey names the template (spec and image digest) a standby is
// prepared for, as Standbys reports it: a hex SHA-256, equal for equal
// containers.
func StandbyKey(spec *atev1.ActorTemplateSpec, imageDigest string) string {
	return standbyHash((&standbyTemplate{spec: spec, imageDigest: imageDigest}).key())
}

// standbyHash is the hex SHA-256 of a standby template's key.
func standbyHash(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// Standbys returns, by StandbyKey, the free workers whose standby is
// ready: what a remote API server mirrors to prefer them (nodeagent).
func (n *Node) Standbys() map[string][]string {
	out := map[string][]string{}
	for key, workers := range n.standbys.ready.copyAll() {
		slices.Sort(workers)
		out[standbyHash(key)] = workers
	}
	return out
}

// StandbyWorkers returns the workers whose standby is ready for spec (from
// image imageDigest), sorted: a start of its actor there skips the
// sandbox's start-up. A worker still preparing one is not listed: a start
// there waits for the preparation first, which made a resume right after
// a suspend (on the worker it freed) much slower than on a worker that
// was ready (BENCHMARKS.md, Activation latency).
func (n *Node) StandbyWorkers(spec *atev1.ActorTemplateSpec, imageDigest string) []string {
	workers := n.standbys.ready.members((&standbyTemplate{spec: spec, imageDigest: imageDigest}).key())
	slices.Sort(workers)
	return workers
}

// sameContainer reports whether a and b describe the same container but
// for its ID and bundle directory.
func sameContainer(a, b sandbox.Spec) bool {
	return a.RootFS == b.RootFS && slices.Equal(a.Args, b.Args) && slices.Equal(a.Env, b.Env) &&
		a.Cwd == b.Cwd && a.LogPath == b.LogPath && slices.Equal(a.Mounts, b.Mounts)
}

// refill prepares a standby on s in the background, for the template s
// hosted last, unless s hosts an actor or has one already. Failures are
// logged; the next start then goes the ordinary way.
func (n *Node) refill(s *slot) {
	if !n.standbys.enabled() || s == n.golden.slot {
		return
	}
	from := n.standbys.startsEnded()
	n.goBackground(func() {
		if n.otherStandbyReady(s) {
			// No hurry: let a resume that follows the suspend (or pause)
			// that freed s have both cores for its restore, and prepare
			// as soon as it has, ready for the next one.
			n.standbys.afterStarts(n.ctx.Done(), from, standbyDefer, standbyDeferMost, func() bool { return n.otherStandbyReady(s) })
			if n.ctx.Err() != nil {
				return
			}
		}
		s.opMu.Lock()
		defer s.opMu.Unlock()
		if err := n.refillOp(s); err != nil {
			n.log.Warn("prepare standby", "worker", s.name, "err", err)
		}
	})
}

// standbyDefer is how long a freed worker waits for a start to come and
// end before preparing its standby when another free worker already
// holds one for the same template (afterStarts). `runsc create` takes a
// core for a while; on the 2-core development VM a resume right after a
// suspend, restoring into another worker's standby while the freed
// worker prepared its own, took up to twice as long (BENCHMARKS.md,
// Activation latency).
const standbyDefer = 300 * time.Millisecond

// standbyDeferMost bounds that wait when starts follow each other
// without a pause.
const standbyDeferMost = 5 * standbyDefer

// otherStandbyReady reports whether a free worker other than s holds a
// standby for the template s hosted last.
func (n *Node) otherStandbyReady(s *slot) bool {
	tpl := s.standby.current()
	if tpl == nil {
		return false
	}
	return slices.ContainsFunc(n.standbys.ready.members(tpl.key()), func(w string) bool { return w != s.name })
}

// refillOp is refill's work; s.opMu is held.
func (n *Node) refillOp(s *slot) error {
	// opMu keeps both from changing between the two reads.
	tpl, busy := s.standby.current(), s.busy() || s.standby.held()
	if busy || tpl == nil || !n.standbys.enabled() || len(s.leftovers) > 0 {
		return nil
	}
	// Not cancelled by Shutdown: killing `runsc create` midway would
	// orphan the sandbox processes it started before runsc recorded them.
	// Shutdown waits for opMu instead and destroys the finished standby.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), refillTimeout)
	defer cancel()
	spec, err := n.standbySpec(ctx, s, tpl)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := n.standbys.prep.Prepare(ctx, s.sb, spec); err != nil {
		return err
	}
	n.standbys.set(s.name, &s.standby, &spec, tpl.key())
	n.log.Debug("standby prepared", "worker", s.name, "container", spec.ID, "duration", time.Since(start))
	return nil
}

// standbySpec is the container a standby for tpl on s is. It empties s's
// volume directories for tpl's volumes, so it must not run while s hosts
// an actor that has volumes. s.opMu is held.
func (n *Node) standbySpec(ctx context.Context, s *slot, tpl *standbyTemplate) (sandbox.Spec, error) {
	c := tpl.spec.GetContainers()[0]
	img, err := n.cfg.Images.EnsurePinned(ctx, tpl.atespace, c.GetImage(), tpl.imageDigest)
	if err != nil {
		return sandbox.Spec{}, fmt.Errorf("image %s: %w", c.GetImage(), err)
	}
	// The volume directories are bind-mounted at Prepare and emptied or
	// filled in place by the start that takes the standby.
	vols, err := n.prepareVolumes(s, tpl.spec, "")
	if err != nil {
		return sandbox.Spec{}, err
	}
	spec, err := n.containerSpec(s, "standby", c, img, vols)
	if err != nil {
		return sandbox.Spec{}, err
	}
	em, err := n.egressMounts(s, tpl.spec)
	if err != nil {
		return sandbox.Spec{}, err
	}
	spec.Mounts = append(spec.Mounts, em...)
	return spec, nil
}

// standbyBesideTimeout bounds a standby's preparation beside a
// checkpoint, which the checkpoint's answer waits for: `runsc create`
// takes well under a second (BENCHMARKS.md), and one that stalls is
// discarded by the runtime, refill trying again afterwards.
const standbyBesideTimeout = 5 * time.Second

// besideStandby is a standby being prepared beside a checkpoint.
type besideStandby struct {
	spec   sandbox.Spec
	key    string
	start  time.Time
	done   chan error
	err    error
	cancel context.CancelFunc
}

// prepareBeside begins preparing s's next standby while the actor s
// hosts is checkpointed, so that a start that follows at once — an
// eviction hands the worker over the moment the victim's checkpoint is
// written — finds the sandbox created instead of paying for `runsc
// create` after the checkpoint (BENCHMARKS.md, "A standby created beside
// the checkpoint"). It first freezes the actor's container
// (sandbox.Freezer), since the preparation takes the worker's network
// from it (sandbox.Preparer): the actor's code never runs without its
// network, and the checkpoint saves it as frozen. The caller waits for
// the preparation (wait) once the checkpoint has ended, whatever its
// outcome, and records the standby (recordBeside) after clearOp, both
// under s.opMu. The standby holds no actor state, and nothing is restored
// into it before the checkpoint has returned, so a victim's state is
// written before its worker hosts anyone else's.
//
// It returns nil, preparing nothing and leaving it to refill after the
// checkpoint, when refill would not prepare at once either (another free
// worker holds a standby for the template), when the template has
// volumes (a standby's preparation empties the worker's volume
// directories, which hold the victim's data until the checkpoint has
// copied it out), for a Data-scope checkpoint, when the runtime cannot
// freeze, and when the freeze fails.
func (n *Node) prepareBeside(ctx context.Context, s *slot, opts CheckpointOptions) *besideStandby {
	freezer, ok := n.cfg.Runtime.(sandbox.Freezer)
	tpl := s.standby.current()
	if !ok || tpl == nil || !n.standbys.enabled() || s == n.golden.slot || len(s.leftovers) > 0 || n.ctx.Err() != nil ||
		opts.Scope == snapshot.ScopeData || len(tpl.spec.GetVolumes()) > 0 || s.standby.held() || n.otherStandbyReady(s) {
		return nil
	}
	s.mu.Lock()
	id := s.containerID
	s.mu.Unlock()
	if id == "" {
		return nil
	}
	// Not cancelled by Shutdown, as in refillOp.
	prepCtx, cancel := context.WithTimeout(context.WithoutCancel(n.ctx), standbyBesideTimeout)
	spec, err := n.standbySpec(prepCtx, s, tpl)
	if err == nil {
		err = freezer.Freeze(ctx, s.sb, id)
	}
	if err != nil {
		cancel()
		n.log.WarnContext(ctx, "prepare standby beside a checkpoint", "worker", s.name, "err", err)
		return nil
	}
	b := &besideStandby{spec: spec, key: tpl.key(), start: time.Now(), done: make(chan error, 1), cancel: cancel}
	// Joined by wait within the checkpoint's call, so no tracking beyond
	// it (goBackground) is needed.
	go func() { b.done <- n.standbys.prep.Prepare(prepCtx, s.sb, spec) }()
	return b
}

// wait waits for b's preparation to end; nil b has none.
func (b *besideStandby) wait() {
	if b == nil {
		return
	}
	b.err = <-b.done
	b.cancel()
}

// recordBeside records b, once waited for, as s's standby. s.opMu is held.
func (n *Node) recordBeside(ctx context.Context, s *slot, b *besideStandby) {
	switch {
	case b == nil:
		return
	case b.err != nil:
		n.containerGone(b.spec.ID) // the runtime discarded it; its bundle stays otherwise
		n.log.WarnContext(ctx, "prepare standby beside a checkpoint", "worker", s.name, "err", b.err)
	case len(s.leftovers) > 0:
		// The checkpointed container outlived its destroy (clearOp): the
		// worker hosts nothing until it is gone, and a standby there
		// would only draw claims to it.
		n.destroy(ctx, s, b.spec.ID)
	default:
		n.standbys.set(s.name, &s.standby, &b.spec, b.key)
		n.log.DebugContext(ctx, "standby prepared", "worker", s.name, "container", b.spec.ID, "duration", time.Since(b.start), "besideCheckpoint", true)
	}
}

// StopStandbys stops preparing standbys, e.g. while shutting down, when
// workers freed by suspending everything will host nothing again. Those
// already prepared stay until Shutdown.
func (n *Node) StopStandbys() { n.standbys.off.Store(true) }

// offerTemplate gives a freshly built template to every worker that has
// hosted no actor yet, so even the first actors start into a standby.
func (n *Node) offerTemplate(atespace string, spec *atev1.ActorTemplateSpec, imageDigest string) {
	for _, name := range n.order {
		s := n.slots[name]
		if s.standby.offer(&standbyTemplate{spec: spec, imageDigest: imageDigest, atespace: atespace}) {
			n.refill(s)
		}
	}
}

// dropStandby destroys s's standby, if any. s.opMu must be held.
func (n *Node) dropStandby(ctx context.Context, s *slot) {
	if sb := n.standbys.take(s.name, &s.standby); sb != nil {
		n.destroy(ctx, s, sb.ID)
	}
}
