package loadgen

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Pin sets the CPU affinity of every thread of process pid to cpus and
// returns a function that restores each thread's previous affinity
// (threads started since inherit their creator's). Threads a process
// starts later inherit from the thread that starts them, so pinning all
// current threads pins the process. Errors: pid not found, or the
// affinity call failing (EPERM for another user's process, EINVAL for
// CPUs that do not exist).
func Pin(pid int, cpus ...int) (restore func(), err error) {
	var set unix.CPUSet
	for _, c := range cpus {
		set.Set(c)
	}
	tids, err := threads(pid)
	if err != nil {
		return nil, err
	}
	before := map[int]unix.CPUSet{}
	restore = func() {
		for tid, old := range before {
			_ = unix.SchedSetaffinity(tid, &old)
		}
	}
	for _, tid := range tids {
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(tid, &old); err != nil {
			continue // the thread ended
		}
		if err := unix.SchedSetaffinity(tid, &set); err != nil && !errors.Is(err, unix.ESRCH) {
			restore()
			return nil, fmt.Errorf("pin thread %d of %d to CPUs %v: %w", tid, pid, cpus, err)
		}
		before[tid] = old
	}
	return restore, nil
}

// PinTree pins process pid and all its descendants (Pin), for a process
// such as a sandbox runtime that forks helpers; it returns a function
// undoing all of it.
func PinTree(pid int, cpus ...int) (restore func(), err error) {
	var undo []func()
	restore = func() {
		for _, u := range undo {
			u()
		}
	}
	for _, p := range append([]int{pid}, descendants(pid)...) {
		u, err := Pin(p, cpus...)
		if err != nil {
			if _, statErr := os.Stat(fmt.Sprintf("/proc/%d", p)); statErr != nil {
				continue // it ended meanwhile
			}
			restore()
			return nil, err
		}
		undo = append(undo, u)
	}
	return restore, nil
}

// CPUTime returns the user plus system CPU time process pid has used,
// all its threads together (/proc/pid/stat; children not included).
func CPUTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may
	// hold spaces: state is field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields after the name", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	// USER_HZ is 100 on every Linux ABI Go supports.
	return time.Duration(ticks) * (time.Second / 100), nil
}

// threads lists the thread ids of process pid.
func threads(pid int) ([]int, error) {
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil, err
	}
	var tids []int
	for _, e := range ents {
		if tid, err := strconv.Atoi(e.Name()); err == nil {
			tids = append(tids, tid)
		}
	}
	return tids, nil
}

// descendants lists the processes below pid, from /proc/*/stat parents.
func descendants(pid int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	children := map[int][]int{}
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 {
			continue
		}
		self, err1 := strconv.Atoi(filepath.Base(filepath.Dir(p)))
		parent, err2 := strconv.Atoi(f[1])
		if err1 == nil && err2 == nil {
			children[parent] = append(children[parent], self)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		out = append(out, children[p]...)
		queue = append(queue, children[p]...)
	}
	return out
}
