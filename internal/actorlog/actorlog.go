// Package actorlog keeps each actor's output on the node that ran it,
// across its moves between workers: a Capture copies the lines a
// container writes to its worker's log file into the actor's own log
// while the actor runs there, between a "resume" and a "stop" marker
// line. Lines are numbered (run, seq): run is the resume that started
// the actor (Line.Run), seq counts within it, so the lines of one actor,
// read from every node that hosted it, sort into one order and a
// follower's cursor says exactly what it has seen (docs/logs-and-events.md).
package actorlog

import (
	"bufio"
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Kinds of Line.
const (
	KindOut    = "out"
	KindResume = "resume"
	KindStop   = "stop"
)

// Line is one line of an actor's log.
type Line struct {
	Run  int64     `json:"r"`
	Seq  int64     `json:"n"`
	Time time.Time `json:"t"`
	Kind string    `json:"k"`
	Text string    `json:"l"`
	// Worker is where it was written; Node is set by readers.
	Worker string `json:"w,omitempty"`
	Node   string `json:"-"`
}

// Cursor is a position in an actor's log: the lines after it are those
// with a larger (Run, Seq).
type Cursor struct{ Run, Seq int64 }

// Of returns l's position.
func Of(l Line) Cursor { return Cursor{l.Run, l.Seq} }

// Compare orders cursors by Run, then Seq.
func (c Cursor) Compare(d Cursor) int {
	if r := cmp.Compare(c.Run, d.Run); r != 0 {
		return r
	}
	return cmp.Compare(c.Seq, d.Seq)
}

// Sort orders lines by their cursor.
func Sort(ls []Line) { slices.SortStableFunc(ls, func(a, b Line) int { return Of(a).Compare(Of(b)) }) }

// Sizes (docs/logs-and-events.md).
const (
	// MaxFileBytes bounds one actor's current log file on a node; past
	// it the file becomes <uid>.log.1 (replacing the older one), so an
	// actor keeps at most 2×MaxFileBytes of log per node.
	MaxFileBytes = 1 << 20
	// MaxLineBytes splits longer lines, so one record stays small.
	MaxLineBytes = 16 << 10
	// pumpEvery is how often a running actor's new output is copied
	// into its log: the delay a follower sees at most, besides its own
	// polling.
	pumpEvery = 200 * time.Millisecond
)

// Dir holds the per-actor logs of one node, <dir>/<actor uid>.log (and
// .log.1). Safe for concurrent use.
type Dir struct {
	dir string
	mu  sync.Mutex // guards files
	// files are the actors whose log this process has opened.
	files map[string]*file
}

// file is one actor's log. mu guards writes and the cursor, and makes a
// read see whole records.
type file struct {
	mu   sync.Mutex
	path string
	last Cursor
	// loaded: last was read from disk.
	loaded bool
}

// Open returns the Dir at dir, creating it.
func Open(dir string) (*Dir, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("actor log dir: %w", err)
	}
	return &Dir{dir: dir, files: map[string]*file{}}, nil
}

func (d *Dir) file(uid string) *file {
	d.mu.Lock()
	defer d.mu.Unlock()
	f, ok := d.files[uid]
	if !ok {
		f = &file{path: filepath.Join(d.dir, uid+".log")}
		d.files[uid] = f
	}
	return f
}

// Forget deletes the actor's log (its actor was deleted).
func (d *Dir) Forget(uid string) {
	d.mu.Lock()
	f := d.files[uid]
	delete(d.files, uid)
	d.mu.Unlock()
	path := filepath.Join(d.dir, uid+".log")
	if f != nil {
		f.mu.Lock()
		defer f.mu.Unlock()
	}
	_ = os.Remove(path)
	_ = os.Remove(path + ".1")
}

// readAll returns the records of f's files, older file first. f.mu held.
func (f *file) readAll() ([]Line, error) {
	var out []Line
	for _, p := range []string{f.path + ".1", f.path} {
		b, err := os.ReadFile(p)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for rec := range bytes.SplitSeq(b, []byte("\n")) {
			if len(rec) == 0 {
				continue
			}
			var l Line
			if json.Unmarshal(rec, &l) == nil { // a torn last record (a crash mid-write) is skipped
				out = append(out, l)
			}
		}
	}
	return out, nil
}

// append writes lines of run (numbered on from f.last), rotating first
// when the file is full. f.mu held.
func (f *file) append(run int64, worker string, lines []Line) error {
	if !f.loaded {
		all, err := f.readAll()
		if err != nil {
			return err
		}
		if len(all) > 0 {
			f.last = Of(all[len(all)-1])
		}
		f.loaded = true
	}
	if fi, err := os.Stat(f.path); err == nil && fi.Size() >= MaxFileBytes {
		if err := os.Rename(f.path, f.path+".1"); err != nil {
			return err
		}
	}
	var buf bytes.Buffer
	for _, l := range lines {
		if f.last.Run != run {
			f.last = Cursor{Run: run}
		}
		f.last.Seq++
		l.Run, l.Seq, l.Worker = run, f.last.Seq, worker
		b, err := json.Marshal(l)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	w, err := os.OpenFile(f.path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		return err
	}
	_, err = w.Write(buf.Bytes())
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// Read returns the actor's lines after the cursor, in order, at most
// limit (0: all), with Node set to node.
func (d *Dir) Read(uid string, after Cursor, limit int, node string) ([]Line, error) {
	f := d.file(uid)
	f.mu.Lock()
	all, err := f.readAll()
	f.mu.Unlock()
	if err != nil {
		return nil, fmt.Errorf("read actor log %s: %w", uid, err)
	}
	var out []Line
	for _, l := range all {
		if Of(l).Compare(after) > 0 {
			l.Node = node
			out = append(out, l)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// Capture copies one run's output from a worker log file into an
// actor's log, from the file's size at Begin on. Its methods are not for
// concurrent use with each other (the node calls them under the slot's
// operation lock).
type Capture struct {
	f      *file
	run    int64
	worker string
	src    string
	// mu guards off and partial, shared with the pump goroutine.
	mu      sync.Mutex
	off     int64
	partial []byte
	stop    chan struct{}
	done    chan struct{}
}

// Begin starts copying the output that worker's log file src receives
// from now on into the actor's log as run, after a resume marker line
// with text.
func (d *Dir) Begin(uid string, run int64, worker, src, text string) (*Capture, error) {
	var off int64
	if fi, err := os.Stat(src); err == nil {
		off = fi.Size()
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	c := &Capture{f: d.file(uid), run: run, worker: worker, src: src, off: off, stop: make(chan struct{}), done: make(chan struct{})}
	if err := c.write([]Line{{Time: time.Now().UTC(), Kind: KindResume, Text: text}}); err != nil {
		return nil, err
	}
	go c.pumpLoop()
	return c, nil
}

func (c *Capture) write(ls []Line) error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	return c.f.append(c.run, c.worker, ls)
}

func (c *Capture) pumpLoop() {
	defer close(c.done)
	t := time.NewTicker(pumpEvery)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			return
		case <-t.C:
			_ = c.pump(false) // retried at the next tick and at Finish
		}
	}
}

// pump copies what src gained since the last pump; a last line without
// its newline is kept for later unless final.
func (c *Capture) pump(final bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	r, err := os.Open(c.src)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer r.Close()
	if fi, err := r.Stat(); err == nil && fi.Size() < c.off {
		c.off = 0 // the worker log was truncated: read it afresh
	}
	if _, err := r.Seek(c.off, io.SeekStart); err != nil {
		return err
	}
	now := time.Now().UTC()
	var lines []Line
	br := bufio.NewReader(r)
	var n int64
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		c.partial = append(c.partial, chunk...)
		if err == nil || len(c.partial) >= MaxLineBytes {
			text := bytes.TrimSuffix(c.partial, []byte("\n"))
			lines = append(lines, Line{Time: now, Kind: KindOut, Text: string(text)})
			c.partial = c.partial[:0]
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			break
		}
	}
	if final && len(c.partial) > 0 {
		lines = append(lines, Line{Time: now, Kind: KindOut, Text: string(c.partial)})
		c.partial = c.partial[:0]
	}
	if len(lines) > 0 {
		if err := c.write(lines); err != nil {
			return err
		}
	}
	c.off += n
	return nil
}

// Finish copies the rest of the output (the container must have
// stopped writing: it is gone) and ends the run with a stop marker line
// with text.
func (c *Capture) Finish(text string) error {
	close(c.stop)
	<-c.done
	err := c.pump(true)
	return errors.Join(err, c.write([]Line{{Time: time.Now().UTC(), Kind: KindStop, Text: text}}))
}
