package actorlog

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func texts(ls []Line) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		out[i] = fmt.Sprintf("%d.%d %s %s", l.Run, l.Seq, l.Kind, l.Text)
	}
	return out
}

func appendTo(t *testing.T, path, s string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(s); err != nil {
		t.Fatal(err)
	}
}

// TestCaptureRuns: two runs on two workers' files, one of them with
// output from before its start (not the actor's) and a last line
// without a newline; the log holds each run's lines between its markers,
// numbered on, and Read after a cursor returns what follows it.
func TestCaptureRuns(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(filepath.Join(dir, "logs"))
	if err != nil {
		t.Fatal(err)
	}
	w0, w1 := filepath.Join(dir, "w0.log"), filepath.Join(dir, "w1.log")
	appendTo(t, w0, "someone else's line\n")
	c, err := d.Begin("uid", 7, "w0", w0, "resumed 7")
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, w0, "a\nb\nhalf")
	if err := c.Finish("suspended 7"); err != nil {
		t.Fatal(err)
	}
	c, err = d.Begin("uid", 9, "w1", w1, "resumed 9")
	if err != nil {
		t.Fatal(err)
	}
	appendTo(t, w1, "c\n")
	if err := c.Finish("stopped 9"); err != nil {
		t.Fatal(err)
	}
	all, err := d.Read("uid", Cursor{}, 0, "n1")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"7.1 resume resumed 7", "7.2 out a", "7.3 out b", "7.4 out half", "7.5 stop suspended 7",
		"9.1 resume resumed 9", "9.2 out c", "9.3 stop stopped 9"}
	if got := texts(all); !slices.Equal(got, want) {
		t.Fatalf("log = %q, want %q", got, want)
	}
	if all[0].Node != "n1" || all[0].Worker != "w0" || all[6].Worker != "w1" {
		t.Fatalf("node/worker: %+v %+v", all[0], all[6])
	}
	after, err := d.Read("uid", Cursor{7, 5}, 2, "n1")
	if err != nil {
		t.Fatal(err)
	}
	if got := texts(after); !slices.Equal(got, want[5:7]) {
		t.Fatalf("Read after 7.5 limit 2 = %q, want %q", got, want[5:7])
	}
	// A new Dir (a restarted node) numbers on from the file.
	d2, _ := Open(filepath.Join(dir, "logs"))
	c, err = d2.Begin("uid", 9, "w1", w1, "resumed 9 again")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Finish("stopped"); err != nil {
		t.Fatal(err)
	}
	all, _ = d2.Read("uid", Cursor{9, 3}, 0, "n1")
	if got := texts(all); !slices.Equal(got, []string{"9.4 resume resumed 9 again", "9.5 stop stopped"}) {
		t.Fatalf("after restart: %q", got)
	}
	d2.Forget("uid")
	if all, _ := d2.Read("uid", Cursor{}, 0, "n1"); len(all) != 0 {
		t.Fatalf("after Forget: %q", texts(all))
	}
}

// TestRotation: past MaxFileBytes the log moves to .1, so at most two
// files remain and the newest lines are always readable.
func TestRotation(t *testing.T) {
	dir := t.TempDir()
	d, _ := Open(dir)
	src := filepath.Join(dir, "w.log")
	line := strings.Repeat("x", 1000) + "\n"
	for run := int64(1); run <= 3; run++ {
		c, err := d.Begin("uid", run, "w", src, "resume")
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			appendTo(t, src, strings.Repeat(line, MaxFileBytes/1000/4))
			if err := c.pump(false); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Finish("stop"); err != nil {
			t.Fatal(err)
		}
	}
	var total int64
	matches, _ := filepath.Glob(filepath.Join(dir, "uid.log*"))
	for _, m := range matches {
		fi, _ := os.Stat(m)
		total += fi.Size()
	}
	if len(matches) != 2 || total > 3*MaxFileBytes {
		t.Fatalf("files %v, %d bytes; want 2 files of about MaxFileBytes", matches, total)
	}
	all, _ := d.Read("uid", Cursor{}, 0, "")
	if last := all[len(all)-1]; last.Run != 3 || last.Kind != KindStop {
		t.Fatalf("last line %+v, want run 3's stop", last)
	}
}

// TestFollower: lines come once, in order; a later run is held back
// while the current run has no stop line, until GiveUp.
func TestFollower(t *testing.T) {
	l := func(run, seq int64, kind string) Line { return Line{Run: run, Seq: seq, Kind: kind, Text: kind} }
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name  string
		polls [][]Line // what the source has at each poll
		at    []time.Duration
		want  [][]string
	}{
		{
			name: "in order, once",
			polls: [][]Line{
				{l(1, 1, KindResume), l(1, 2, KindOut)},
				{l(1, 1, KindResume), l(1, 2, KindOut), l(1, 3, KindStop), l(2, 1, KindResume)},
			},
			at:   []time.Duration{0, time.Second},
			want: [][]string{{"1.1 resume resume", "1.2 out out"}, {"1.3 stop stop", "2.1 resume resume"}},
		},
		{
			name: "later run held until the stop line arrives",
			polls: [][]Line{
				{l(1, 1, KindResume), l(1, 2, KindOut), l(2, 1, KindResume)},
				{l(1, 1, KindResume), l(1, 2, KindOut), l(1, 3, KindOut), l(1, 4, KindStop), l(2, 1, KindResume)},
			},
			at:   []time.Duration{0, time.Second},
			want: [][]string{{"1.1 resume resume", "1.2 out out"}, {"1.3 out out", "1.4 stop stop", "2.1 resume resume"}},
		},
		{
			name: "given up on a run whose node is gone",
			polls: [][]Line{
				{l(1, 1, KindResume), l(2, 1, KindResume)},
				{l(2, 1, KindResume), l(2, 2, KindOut)},
				{l(2, 1, KindResume), l(2, 2, KindOut)},
			},
			at:   []time.Duration{0, time.Second, DefaultGiveUp + time.Second},
			want: [][]string{{"1.1 resume resume"}, nil, {"1.1 stop --- ate: no stop line for this run arrived; its node may be gone, with the rest of its output", "2.1 resume resume", "2.2 out out"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			i := 0
			f := NewFollower(func(_ context.Context, after Cursor) ([]Line, error) {
				var out []Line
				for _, l := range tc.polls[i] {
					if Of(l).Compare(after) > 0 {
						out = append(out, l)
					}
				}
				return out, nil
			})
			for i = range tc.polls {
				got, err := f.Next(context.Background(), t0.Add(tc.at[i]))
				if err != nil {
					t.Fatal(err)
				}
				if g := texts(got); !slices.Equal(g, tc.want[i]) {
					t.Fatalf("poll %d: %q, want %q", i, g, tc.want[i])
				}
			}
		})
	}
}
