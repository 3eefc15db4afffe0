package node

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"
)

// identityNames are the files under IdentityDir, in identityFiles order.
var identityNames = [3]string{"actor-name", "atespace", "actor-uid"}

// identityFiles are one worker's identity files, opened once and then
// rewritten in place before every boot or restore (a restore from a golden
// snapshot must read its own name). In place, because a prepared sandbox's
// bind mount follows the directory and holds the files, and because
// create-and-rename cost three times as much under load. Kept open,
// because opening a file costs Go six system calls (open, four fcntl and
// an epoll_ctl for the poller that regular files refuse) and close one
// more: of the ~220 system calls a fake wake-up made, 45 were these three
// files' (strace -c, BENCHMARKS.md). Not safe for concurrent use: the
// slot's opMu guards it.
type identityFiles struct {
	files [3]*os.File
	// held is what each file holds when known is set; unknown (a new
	// process, or a failed write) makes the next write truncate all.
	held  [3]string
	known bool
}

// write makes the files in dir hold name, atespace and uid; files that
// already do are not touched, so an actor returning to its worker costs
// nothing.
func (f *identityFiles) write(dir string, id [3]string) error {
	if f.known && f.held == id {
		return nil
	}
	known := f.known
	f.known = false
	for i, v := range id {
		if known && f.held[i] == v {
			continue
		}
		if f.files[i] == nil {
			file, err := os.OpenFile(filepath.Join(dir, identityNames[i]), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			f.files[i] = file
		}
		if _, err := f.files[i].WriteAt([]byte(v), 0); err != nil {
			return err
		}
		if !known || len(f.held[i]) != len(v) {
			if err := f.files[i].Truncate(int64(len(v))); err != nil {
				return err
			}
		}
	}
	f.held, f.known = id, true
	return nil
}

// close closes the files; a later write opens them again.
func (f *identityFiles) close() error {
	var errs []error
	for i, file := range f.files {
		if file != nil {
			errs = append(errs, file.Close())
			f.files[i] = nil
		}
	}
	f.known = false
	return errors.Join(errs...)
}

// workerFiles are what one worker keeps open across starts: its identity
// files, its restore notification files and its container log. Not safe
// for concurrent use: the slot's opMu guards it.
type workerFiles struct {
	identity identityFiles
	notice   noticeFiles
	log      *os.File
}

// close closes the files; later writes open them again.
func (f *workerFiles) close() {
	_ = f.identity.close()
	_ = f.notice.close()
	if f.log != nil {
		_ = f.log.Close()
		f.log = nil
	}
}

// identityWriter writes what a worker's sandbox reads about itself and
// what the node logs of it: the identity and restore notification files
// under each worker's directory and the per-worker container logs, all
// under the node's state dir. It owns the generation counter; the open
// files are each slot's (workerFiles). Safe for concurrent use on
// different slots.
type identityWriter struct {
	stateDir string
	// generation is the last value written to a /run/ate/generation
	// (next).
	generation atomic.Uint64
}

// workerDir is s's own directory elem under the state dir.
func (w *identityWriter) workerDir(s *slot, elem ...string) string {
	return filepath.Join(append([]string{w.stateDir, "workers", s.name}, elem...)...)
}

// workerLog is the file every container on s writes its output to.
func (w *identityWriter) workerLog(s *slot) string {
	return filepath.Join(w.stateDir, "logs", s.name+".log")
}

// writeIdentity points s's identity files at req's actor. s.opMu must be
// held.
func (w *identityWriter) writeIdentity(s *slot, req StartRequest) error {
	return s.files.identity.write(w.workerDir(s, "identity"), [3]string{req.Name, req.Atespace, req.ActorUID})
}

// noticeNames are the restore notification files under IdentityDir, in
// noticeFiles order.
var noticeNames = [2]string{"generation", "random"}

// noticeFiles are one worker's restore notification files: generation (a
// decimal uint64, identityWriter.next) and random (32 bytes from
// crypto/rand, hex, no newline). Unlike the identity files they are
// rewritten before every start, boot or restore, same actor or not: a
// restored process has no other way to learn that it was restored, and
// everything it seeded in user space before the checkpoint (PRNGs, keys)
// is shared with every other restore of the same snapshot
// (docs/restore.md). Kept open and rewritten in place for the reasons
// identityFiles are. Not safe for concurrent use: the slot's opMu guards
// it.
type noticeFiles struct {
	files [2]*os.File
	// lens is each file's length when known, -1 when not (just opened,
	// or a failed write), so the Truncate is skipped when the length
	// stays (a generation keeps its 19 digits for centuries).
	lens [2]int
}

// write makes the files in dir hold v (generation, random).
func (f *noticeFiles) write(dir string, v [2]string) error {
	for i, s := range v {
		if f.files[i] == nil {
			file, err := os.OpenFile(filepath.Join(dir, noticeNames[i]), os.O_RDWR|os.O_CREATE, 0o644)
			if err != nil {
				return err
			}
			f.files[i], f.lens[i] = file, -1
		}
		if _, err := f.files[i].WriteAt([]byte(s), 0); err != nil {
			f.lens[i] = -1
			return err
		}
		if f.lens[i] != len(s) {
			if err := f.files[i].Truncate(int64(len(s))); err != nil {
				f.lens[i] = -1
				return err
			}
			f.lens[i] = len(s)
		}
	}
	return nil
}

// close closes the files; a later write opens them again.
func (f *noticeFiles) close() error {
	var errs []error
	for i, file := range f.files {
		if file != nil {
			errs = append(errs, file.Close())
			f.files[i] = nil
		}
	}
	return errors.Join(errs...)
}

// writeNotice gives s's next start a new generation and 32 fresh random
// bytes, and returns the generation. It runs before every boot or
// restore, so the process finds them before it runs again, let alone
// before the wakeup probe or any request. s.opMu must be held.
func (w *identityWriter) writeNotice(s *slot) (uint64, error) {
	var b [32]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand: it crashes the program instead)
	gen := w.next()
	err := s.files.notice.write(w.workerDir(s, "identity"), [2]string{strconv.FormatUint(gen, 10), hex.EncodeToString(b[:])})
	return gen, err
}

// next returns a new generation: the wall clock in nanoseconds
// since the Unix epoch, or one more than the node's previous generation
// when the clock has not passed it (two starts in one nanosecond, a clock
// stepped back). So generations increase strictly on a node whatever the
// clock does, unlike a counter they keep increasing across restarts of
// the node (as long as the clock does not step back by more than the
// downtime), and two nodes would have to start actors in the same
// nanosecond to hand out the same one. Generations say "this is a new
// start" and order one node's starts; what no other start shares is
// /run/ate/random.
func (w *identityWriter) next() uint64 {
	for {
		prev := w.generation.Load()
		next := max(prev+1, uint64(time.Now().UnixNano()))
		if w.generation.CompareAndSwap(prev, next) {
			return next
		}
	}
}

// logStart appends a line naming the actor to the worker's container log,
// which every container on the worker shares (a standby's output file is
// fixed before anyone knows which actor will use it). The file stays open
// for the next start, as the identity files do. Failures only cost the
// line. s.opMu must be held.
func (w *identityWriter) logStart(s *slot, req StartRequest, containerID string, generation uint64) {
	if s.files.log == nil {
		f, err := os.OpenFile(w.workerLog(s), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return
		}
		s.files.log = f
	}
	fmt.Fprintf(s.files.log, "--- %s ate: actor %s/%s uid=%s container=%s snapshot=%q generation=%d\n",
		time.Now().UTC().Format(time.RFC3339Nano), req.Atespace, req.Name, req.ActorUID, containerID, req.Snapshot, generation)
}
