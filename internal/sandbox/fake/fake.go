// Package fake is the in-process sandbox class "fake": a sandbox.Runtime for
// control-plane tests and benchmarks that needs no runsc, no network
// namespaces and no root.
//
// Each container is a tiny HTTP server, reached through in-memory pipes
// (pipe.go), that behaves like examples/counter:
//
//	GET /         increments the count, answers "count=N\n"
//	GET /healthz  answers "ok\n" without counting (the wakeup probe)
//	GET /events   a Server-Sent Events stream of keep-alive comments
//
// The count is the container's whole state. Checkpoint writes it as a small
// file (StateFile) into the image directory and Restore reads it back, so the
// node's snapshot staging, commit and open run unchanged over it. RootFS,
// Args, Mounts and BundleDir are ignored; the interior port is $PORT from
// Spec.Env (default 8080), as for the counter.
//
// Config's per-operation delays emulate runsc's cost (BENCHMARKS.md has
// measured values); zero delays measure the control plane alone. Kill
// emulates a sandbox that dies on its own.
package fake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/sandbox"
)

// Class is the sandbox class name workers of this runtime report
// (sandbox.ClassFake's name).
const Class = string(sandbox.ClassFake)

// StateFile is the file Checkpoint writes into the image directory.
const StateFile = "fake-state.json"

// defaultPort is the counter's default $PORT.
const defaultPort = 8080

// readHeaderTimeout bounds a client that opens a connection and sends
// nothing; requests here are tiny, so it is only a backstop.
const readHeaderTimeout = 10 * time.Second

// Errors of this runtime; callers match them with errors.Is.
var (
	// ErrUnknownContainer: no live container has that id (in that slot).
	ErrUnknownContainer = errors.New("unknown container")
	// ErrSlotBusy: the slot already hosts a container.
	ErrSlotBusy = errors.New("slot already hosts a container")
	// ErrNoContainer: DialContext found no container in the slot.
	ErrNoContainer = errors.New("no container in slot")
)

// Config configures a Runtime. The zero value is valid: no delays.
type Config struct {
	// RunDelay, RestoreDelay, CheckpointDelay and DestroyDelay are added
	// to each operation before it takes effect, to emulate the sandbox's
	// own cost (the gvisor runtime's are in BENCHMARKS.md, Activation
	// latency: runtime alone). An operation whose context ends
	// during its delay fails and changes nothing.
	RunDelay        time.Duration
	RestoreDelay    time.Duration
	CheckpointDelay time.Duration
	DestroyDelay    time.Duration
	// Logger receives debug records of every operation; nil discards.
	Logger *slog.Logger
	// Hold, if set, makes GET /held wait until it is closed (or the
	// request ends) before it counts and answers as GET / does; Arrived,
	// if set, receives once per /held request as it starts to wait.
	// Tests use them to change the world while an answer is computed.
	Hold    <-chan struct{}
	Arrived chan<- struct{}
}

// Runtime is the fake sandbox class. It is safe for concurrent use; unlike
// sandbox.Runtime requires, even calls for one slot may race (the first to
// take effect wins, the others see ErrSlotBusy or ErrUnknownContainer).
type Runtime struct {
	cfg Config
	log *slog.Logger

	// mu guards byID and bySlot, which always index the same live
	// containers. A container leaves both maps before it is stopped, and
	// whoever removes it stops it, so it is stopped exactly once.
	mu     sync.Mutex
	byID   map[string]*container
	bySlot map[string]*container
	// prepared maps a prepared container's id to its slot's name.
	prepared map[string]string

	// logs holds each container log file open once written, as a real
	// sandbox keeps its output file open; guarded by logMu.
	logMu sync.Mutex
	logs  map[string]*os.File

	// waiting, if set, is called once Wait has found its container and
	// is about to block: tests use it to end the container only then.
	waiting func(id string)
}

var (
	_ sandbox.Runtime  = (*Runtime)(nil)
	_ sandbox.Preparer = (*Runtime)(nil)
)

// New returns a Runtime with no containers.
func New(cfg Config) *Runtime {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Runtime{cfg: cfg, log: log, byID: map[string]*container{}, bySlot: map[string]*container{}, prepared: map[string]string{},
		logs: map[string]*os.File{}}
}

// Setup is the node.SlotSetup of this class: a slot needs nothing but its
// name (no network namespaces).
func Setup(_ context.Context, name string) (sandbox.Slot, error) {
	return sandbox.Slot{Name: name}, nil
}

// state is the content of StateFile.
type state struct {
	Count int64 `json:"count"`
}

// Prepare records spec.ID as created in slot; a Run or Restore of it with
// Prepared set must follow in the same slot. It costs nothing, as the
// fake has no sandbox to start.
func (r *Runtime) Prepare(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("fake: prepare %s in %s: %w", spec.ID, slot.Name, err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.prepared[spec.ID]; ok || r.byID[spec.ID] != nil {
		return fmt.Errorf("fake: prepare %s in %s: container id is in use", spec.ID, slot.Name)
	}
	r.prepared[spec.ID] = slot.Name
	return nil
}

// Run boots spec in slot with a count of zero and returns once it serves.
func (r *Runtime) Run(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec) error {
	if err := delay(ctx, r.cfg.RunDelay); err != nil {
		return fmt.Errorf("fake: run %s in %s: %w", spec.ID, slot.Name, err)
	}
	if err := r.start(slot, spec, 0); err != nil {
		return fmt.Errorf("fake: run %s in %s: %w", spec.ID, slot.Name, err)
	}
	return nil
}

// Restore starts spec in slot with the count saved in imageDir. A missing
// or unreadable state file, or a context that ends first, fails with an
// error wrapping sandbox.ErrRestoreFailed; the slot is then left as it was.
func (r *Runtime) Restore(ctx context.Context, slot sandbox.Slot, spec sandbox.Spec, imageDir string) error {
	if err := delay(ctx, r.cfg.RestoreDelay); err != nil {
		return fmt.Errorf("fake: restore %s in %s: %w: %w", spec.ID, slot.Name, sandbox.ErrRestoreFailed, err)
	}
	data, err := os.ReadFile(filepath.Join(imageDir, StateFile))
	if err != nil {
		return fmt.Errorf("fake: restore %s in %s: %w: %w", spec.ID, slot.Name, sandbox.ErrRestoreFailed, err)
	}
	var st state
	if err := codec.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("fake: restore %s in %s: %w: state file: %w", spec.ID, slot.Name, sandbox.ErrRestoreFailed, err)
	}
	if err := r.start(slot, spec, st.Count); err != nil {
		return fmt.Errorf("fake: restore %s in %s: %w", spec.ID, slot.Name, err)
	}
	return nil
}

// Checkpoint stops container id in slot and writes its count into imageDir.
// The container is stopped before the file is written, as a real
// checkpoint freezes the sandbox first, so no request counts after the
// snapshot; if writing fails the container is gone all the same.
func (r *Runtime) Checkpoint(ctx context.Context, slot sandbox.Slot, id string, imageDir string) error {
	if err := delay(ctx, r.cfg.CheckpointDelay); err != nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, err)
	}
	c := r.remove(slot.Name, id)
	if c == nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, ErrUnknownContainer)
	}
	count := c.stop()
	data, err := codec.Marshal(state{Count: count})
	if err == nil {
		err = os.WriteFile(filepath.Join(imageDir, StateFile), data, 0o600)
	}
	if err != nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, err)
	}
	r.log.DebugContext(ctx, "fake checkpoint", "worker", slot.Name, "container", id, "count", count)
	return nil
}

// CheckpointLive implements sandbox.LiveCheckpointer: it writes the
// count as Checkpoint does and leaves the container counting on.
func (r *Runtime) CheckpointLive(ctx context.Context, slot sandbox.Slot, id string, imageDir string) error {
	if err := delay(ctx, r.cfg.CheckpointDelay); err != nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, err)
	}
	c := r.inSlot(slot, id)
	if c == nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, ErrUnknownContainer)
	}
	c.mu.Lock()
	count := c.count
	c.mu.Unlock()
	data, err := codec.Marshal(state{Count: count})
	if err == nil {
		err = os.WriteFile(filepath.Join(imageDir, StateFile), data, 0o600)
	}
	if err != nil {
		return fmt.Errorf("fake: checkpoint %s in %s: %w", id, slot.Name, err)
	}
	return nil
}

var _ sandbox.LiveCheckpointer = (*Runtime)(nil)

// Freeze implements sandbox.Freezer. The fake's count changes only when
// asked, so freezing it needs nothing beyond finding it.
func (r *Runtime) Freeze(ctx context.Context, slot sandbox.Slot, id string) error {
	c := r.inSlot(slot, id)
	if c == nil {
		return fmt.Errorf("fake: freeze %s in %s: %w", id, slot.Name, ErrUnknownContainer)
	}
	r.log.DebugContext(ctx, "fake freeze", "worker", slot.Name, "container", id)
	return nil
}

var _ sandbox.Freezer = (*Runtime)(nil)

// Destroy stops and forgets container id. It is idempotent and returns nil
// for an unknown id.
func (r *Runtime) Destroy(ctx context.Context, slot sandbox.Slot, id string) error {
	if err := delay(ctx, r.cfg.DestroyDelay); err != nil {
		return fmt.Errorf("fake: destroy %s in %s: %w", id, slot.Name, err)
	}
	if c := r.remove(slot.Name, id); c != nil {
		c.stop()
		r.log.DebugContext(ctx, "fake destroy", "worker", slot.Name, "container", id)
	}
	r.mu.Lock()
	if r.prepared[id] == slot.Name {
		delete(r.prepared, id)
	}
	r.mu.Unlock()
	return nil
}

// DialContext connects to port of the container in slot. A port the
// container does not serve is refused (syscall.ECONNREFUSED), like a real
// one; an empty slot fails with ErrNoContainer.
func (r *Runtime) DialContext(ctx context.Context, slot sandbox.Slot, port int) (net.Conn, error) {
	r.mu.Lock()
	c := r.bySlot[slot.Name]
	r.mu.Unlock()
	if c == nil {
		return nil, fmt.Errorf("fake: dial port %d in %s: %w", port, slot.Name, ErrNoContainer)
	}
	if port != c.port {
		return nil, fmt.Errorf("fake: dial port %d in %s (serves %d): %w", port, slot.Name, c.port, syscall.ECONNREFUSED)
	}
	conn, err := c.ln.dial(ctx)
	if errors.Is(err, net.ErrClosed) {
		// It stopped meanwhile: refused, as a sandbox that just ended.
		err = syscall.ECONNREFUSED
	}
	if err != nil {
		return nil, fmt.Errorf("fake: dial port %d in %s: %w", port, slot.Name, err)
	}
	return conn, nil
}

// Wait blocks until container id ends (checkpoint, Destroy or Kill) and
// then returns nil, or until ctx ends. An unknown id returns at once with
// ErrUnknownContainer.
func (r *Runtime) Wait(ctx context.Context, slot sandbox.Slot, id string) error {
	c := r.inSlot(slot, id)
	if c == nil {
		return fmt.Errorf("fake: wait %s in %s: %w", id, slot.Name, ErrUnknownContainer)
	}
	if r.waiting != nil {
		r.waiting(id)
	}
	select {
	case <-c.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("fake: wait %s in %s: %w", id, slot.Name, ctx.Err())
	}
}

// Kill ends container id as if its process had crashed: its server stops,
// Wait returns and the slot is empty, with no checkpoint. It is the test
// hook for crash detection. ErrUnknownContainer when id is not running.
func (r *Runtime) Kill(id string) error {
	r.mu.Lock()
	c := r.byID[id]
	r.mu.Unlock()
	if c == nil || r.remove(c.slot, id) == nil {
		return fmt.Errorf("fake: kill %s: %w", id, ErrUnknownContainer)
	}
	c.stop()
	r.log.Debug("fake kill", "worker", c.slot, "container", id)
	return nil
}

// inSlot returns container id if it runs in slot, nil otherwise.
func (r *Runtime) inSlot(slot sandbox.Slot, id string) *container {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.byID[id]; c != nil && c.slot == slot.Name {
		return c
	}
	return nil
}

// Container returns the id of the container slot hosts, if any.
func (r *Runtime) Container(slot string) (id string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.bySlot[slot]
	if c == nil {
		return "", false
	}
	return c.id, true
}

// Len returns how many containers are running.
func (r *Runtime) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byID)
}

// Prepared returns how many prepared containers wait for a start.
func (r *Runtime) Prepared() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.prepared)
}

// Close stops every container. The Runtime stays usable.
func (r *Runtime) Close() error {
	r.mu.Lock()
	all := make([]*container, 0, len(r.byID))
	for id, c := range r.byID {
		all = append(all, c)
		delete(r.byID, id)
		delete(r.bySlot, c.slot)
	}
	clear(r.prepared)
	r.mu.Unlock()
	for _, c := range all {
		c.stop()
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	var errs []error
	for p, f := range r.logs {
		errs = append(errs, f.Close())
		delete(r.logs, p)
	}
	return errors.Join(errs...)
}

// start registers and starts a container serving count in slot.
func (r *Runtime) start(slot sandbox.Slot, spec sandbox.Spec, count int64) error {
	port, err := specPort(spec.Env)
	if err != nil {
		return err
	}
	if spec.ID == "" {
		return errors.New("container id is required")
	}
	r.mu.Lock()
	if spec.Prepared {
		if r.prepared[spec.ID] != slot.Name {
			r.mu.Unlock()
			return fmt.Errorf("prepared container %s: %w", spec.ID, ErrUnknownContainer)
		}
		delete(r.prepared, spec.ID)
	}
	if cur := r.bySlot[slot.Name]; cur != nil {
		r.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrSlotBusy, cur.id)
	}
	if r.byID[spec.ID] != nil {
		r.mu.Unlock()
		return fmt.Errorf("container id %s is in use", spec.ID)
	}
	c := newContainer(spec.ID, slot.Name, port, count, r.log, r.cfg.Hold, r.cfg.Arrived)
	r.byID[c.id], r.bySlot[c.slot] = c, c
	r.mu.Unlock()
	go c.serve()
	r.appendLog(spec.LogPath, c, count)
	r.log.Debug("fake start", "worker", slot.Name, "container", spec.ID, "count", count)
	return nil
}

// remove takes container id out of the maps if slot hosts it and returns
// it; nil when it is not there. The caller must stop it.
func (r *Runtime) remove(slot, id string) *container {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.byID[id]
	if c == nil || c.slot != slot {
		return nil
	}
	delete(r.byID, id)
	delete(r.bySlot, slot)
	return c
}

// appendLog records the start in the container's log file, as the
// counter's own "listening" line would; failures only cost the line.
func (r *Runtime) appendLog(path string, c *container, count int64) {
	if path == "" {
		return
	}
	r.logMu.Lock()
	defer r.logMu.Unlock()
	f := r.logs[path]
	if f == nil {
		var err error
		if f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600); err != nil {
			return
		}
		r.logs[path] = f
	}
	_, _ = fmt.Fprintf(f, "fake container %s listening on port %d (count %d)\n", c.id, c.port, count)
}

// specPort returns $PORT from env (the last one wins, as in a process
// environment), or defaultPort.
func specPort(env []string) (int, error) {
	port := defaultPort
	for _, kv := range env {
		v, ok := strings.CutPrefix(kv, "PORT=")
		if !ok {
			continue
		}
		p, err := strconv.Atoi(v)
		if err != nil || p < 1 || p > 65535 {
			return 0, fmt.Errorf("PORT=%q is not a TCP port", v)
		}
		port = p
	}
	return port, nil
}

// delay waits d, or fails when ctx ends first. A zero d still fails on an
// ended ctx, as a real runtime would refuse to start work for it.
func delay(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// container is one running fake sandbox.
type container struct {
	id, slot string
	port     int // the interior port it serves
	ln       *pipeListener
	srv      *http.Server
	served   chan struct{} // closed when srv.Serve returned
	exited   chan struct{} // closed once stopped

	// mu guards count and stopped, so that no request counts after a
	// checkpoint read the count.
	mu      sync.Mutex
	count   int64
	stopped bool
}

func newContainer(id, slot string, port int, count int64, log *slog.Logger, hold <-chan struct{}, arrived chan<- struct{}) *container {
	c := &container{id: id, slot: slot, port: port, ln: newPipeListener(), count: count,
		served: make(chan struct{}), exited: make(chan struct{})}
	mux := http.NewServeMux()
	countHandler := func(w http.ResponseWriter, _ *http.Request) {
		n, ok := c.increment()
		if !ok {
			http.Error(w, "container stopped", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "count=%d\n", n)
	}
	mux.HandleFunc("GET /{$}", countHandler)
	if hold != nil {
		mux.HandleFunc("GET /held", func(w http.ResponseWriter, r *http.Request) {
			if arrived != nil {
				select {
				case arrived <- struct{}{}:
				case <-r.Context().Done():
					return
				}
			}
			select {
			case <-hold:
				countHandler(w, r)
			case <-r.Context().Done():
			}
		})
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprint(w, "ok\n")
	})
	// GET /header?name=N&value=V[&status=S] answers with header N: V
	// (and status S, default 200), so tests can see what the tunnel does
	// with headers and statuses an actor sends.
	mux.HandleFunc("GET /header", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(r.URL.Query().Get("name"), r.URL.Query().Get("value"))
		if code, err := strconv.Atoi(r.URL.Query().Get("status")); err == nil {
			w.WriteHeader(code)
		}
		fmt.Fprint(w, "ok\n")
	})
	// GET /echo with "Upgrade: echo" switches protocols (101) and then
	// echoes what it reads: an upgraded connection, as a WebSocket's is.
	mux.HandleFunc("GET /echo", func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "echo" {
			http.Error(w, `send "Upgrade: echo"`, http.StatusUpgradeRequired)
			return
		}
		conn, brw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer conn.Close()
		_, _ = brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n")
		if brw.Flush() != nil {
			return
		}
		_, _ = io.Copy(conn, brw.Reader) // from any bytes it buffered already
	})
	// GET /events?every=MS is a Server-Sent Events stream that sends a
	// keep-alive comment at once and then every MS milliseconds (default
	// 1000) until the client leaves: a listening stream.
	mux.HandleFunc("GET /events", func(w http.ResponseWriter, r *http.Request) {
		every, err := strconv.Atoi(r.URL.Query().Get("every"))
		if err != nil || every <= 0 {
			every = 1000
		}
		w.Header().Set("Content-Type", "text/event-stream")
		rc := http.NewResponseController(w)
		tick := time.NewTicker(time.Duration(every) * time.Millisecond)
		defer tick.Stop()
		for {
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
			select {
			case <-tick.C:
			case <-r.Context().Done():
				return
			}
		}
	})
	c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: readHeaderTimeout,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	return c
}

func (c *container) serve() {
	defer close(c.served)
	_ = c.srv.Serve(c.ln) // ErrServerClosed once stopped
}

func (c *container) increment() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return 0, false
	}
	c.count++
	return c.count, true
}

// stop freezes the count, closes the listener and every connection (as a
// sandbox that ends drops them), waits for the server to return, and
// returns the final count. Called once, by whoever removed c.
func (c *container) stop() int64 {
	c.mu.Lock()
	c.stopped = true
	count := c.count
	c.mu.Unlock()
	_ = c.srv.Close()
	<-c.served
	close(c.exited)
	return count
}
