package actorlog

import (
	"context"
	"time"
)

// Source returns an actor's lines after a cursor from every node that
// keeps some, merged in order (Sort).
type Source func(ctx context.Context, after Cursor) ([]Line, error)

// Follower hands out an actor's lines in (run, seq) order, each once,
// across polls of a Source. Nodes are read one after another, not at
// one instant, so a poll may see a later run on one node before the end
// of the current run arrived on another (its node copies the last
// output at the stop); the follower therefore holds a later run back
// while the current one has no stop line, for up to GiveUp (after which
// the current run's node is taken to be gone and a note says so). Not
// safe for concurrent use.
type Follower struct {
	src    Source
	GiveUp time.Duration
	cur    Cursor
	// open: the last line handed out belongs to a run without its stop
	// line yet.
	open bool
	// held is when a later run was first held back, zero when none is.
	held time.Time
}

// DefaultGiveUp is how long a Follower holds a later run back.
const DefaultGiveUp = 10 * time.Second

// NewFollower returns a Follower from the start of src.
func NewFollower(src Source) *Follower { return &Follower{src: src, GiveUp: DefaultGiveUp} }

// Cursor is where f is.
func (f *Follower) Cursor() Cursor { return f.cur }

// Next reads src once and returns the lines to hand out now, at now.
func (f *Follower) Next(ctx context.Context, now time.Time) ([]Line, error) {
	ls, err := f.src(ctx, f.cur)
	if err != nil {
		return nil, err
	}
	var out []Line
	for _, l := range ls {
		if Of(l).Compare(f.cur) <= 0 {
			continue
		}
		if l.Run > f.cur.Run && f.open {
			if f.held.IsZero() {
				f.held = now
			}
			if now.Sub(f.held) < f.GiveUp {
				break
			}
			out = append(out, Line{Run: f.cur.Run, Seq: f.cur.Seq, Time: now, Kind: KindStop,
				Text: "--- ate: no stop line for this run arrived; its node may be gone, with the rest of its output"})
		}
		f.held = time.Time{}
		out = append(out, l)
		f.cur, f.open = Of(l), l.Kind != KindStop
	}
	return out, nil
}
