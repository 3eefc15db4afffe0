package checkpoint

import (
	"fmt"
	"strconv"
)

// Source is what a resume restores an actor from: the lifecycle
// workflows decide it (the paused checkpoint while its node lives, else
// the actor's durable snapshot, else the template's golden snapshot for
// a template whose new actors start golden, else nothing), and metrics
// counts resumes by it (ate_lifecycle_resumes_total's source). The zero
// value is SourceCold, a resume with nothing to restore.
type Source uint8

const (
	// SourceCold: nothing to restore; the image boots afresh.
	SourceCold Source = iota
	// SourceDurable: the actor's latest durable snapshot, the one a
	// Suspend took, from the snapshot store.
	SourceDurable
	// SourceGolden: the template's golden snapshot, for an actor
	// without a snapshot of its own.
	SourceGolden
	// SourcePaused: the checkpoint a Pause left on the actor's node.
	SourcePaused
)

// String returns the source's name, the metric label value: "cold",
// "durable", "golden" or "paused".
func (s Source) String() string {
	switch s {
	case SourceCold:
		return "cold"
	case SourceDurable:
		return "durable"
	case SourceGolden:
		return "golden"
	case SourcePaused:
		return "paused"
	}
	return "Source(" + strconv.Itoa(int(s)) + ")"
}

// ParseSource parses a source's name. Anything else, the empty string
// included, is an error naming the accepted values.
func ParseSource(s string) (Source, error) {
	for _, v := range []Source{SourceCold, SourceDurable, SourceGolden, SourcePaused} {
		if s == v.String() {
			return v, nil
		}
	}
	return SourceCold, fmt.Errorf("unknown restore source %q: want %s, %s, %s or %s", s, SourcePaused, SourceDurable, SourceGolden, SourceCold)
}

// MarshalText implements encoding.TextMarshaler.
func (s Source) MarshalText() ([]byte, error) { return []byte(s.String()), nil }
