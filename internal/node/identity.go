package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
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

// writeIdentity points s's identity files at req's actor. s.opMu must be
// held.
func (n *Node) writeIdentity(s *slot, req StartRequest) error {
	return s.identity.write(n.workerDir(s, "identity"), [3]string{req.Name, req.Atespace, req.ActorUID})
}

// logStart appends a line naming the actor to the worker's container log,
// which every container on the worker shares (a standby's output file is
// fixed before anyone knows which actor will use it). The file stays open
// for the next start, as the identity files do. Failures only cost the
// line. s.opMu must be held.
func (n *Node) logStart(s *slot, req StartRequest, containerID string) {
	if s.log == nil {
		f, err := os.OpenFile(n.workerLog(s), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
		if err != nil {
			return
		}
		s.log = f
	}
	fmt.Fprintf(s.log, "--- %s ate: actor %s/%s uid=%s container=%s snapshot=%q\n",
		time.Now().UTC().Format(time.RFC3339Nano), req.Atespace, req.Name, req.ActorUID, containerID, req.Snapshot)
}

// closeFiles closes what s keeps open across starts. s.opMu must be held.
func (s *slot) closeFiles() {
	_ = s.identity.close()
	if s.log != nil {
		_ = s.log.Close()
		s.log = nil
	}
}
