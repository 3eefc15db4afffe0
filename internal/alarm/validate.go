package alarm

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Limits on what an alarm may ask for (docs/alarms.md).
const (
	// MaxPathLen bounds an alarm's path, in bytes.
	MaxPathLen = 1024
	// MaxAhead bounds how far ahead an alarm may be set.
	MaxAhead = 365 * 24 * time.Hour
	// DefaultMaxPending is how many pending alarms an actor may have.
	DefaultMaxPending = 16
)

// ErrInvalid: an alarm's path or time is not acceptable; the message says
// which and why.
var ErrInvalid = errors.New("invalid alarm")

// Validate checks an alarm's path and due time at now: path starts with
// '/' and is at most MaxPathLen bytes without control characters; at lies
// after now minus a second (clock skew) and no more than MaxAhead after
// now. The error wraps ErrInvalid.
func Validate(now, at time.Time, path string) error {
	switch {
	case path == "":
		return fmt.Errorf("%w: path is empty; give the request path to POST to, like /tick", ErrInvalid)
	case !strings.HasPrefix(path, "/"):
		return fmt.Errorf("%w: path %q must start with '/'", ErrInvalid, path)
	case len(path) > MaxPathLen:
		return fmt.Errorf("%w: path is %d bytes, at most %d are allowed", ErrInvalid, len(path), MaxPathLen)
	case strings.ContainsFunc(path, func(r rune) bool { return r < 0x20 || r == 0x7f || r == ' ' }):
		return fmt.Errorf("%w: path %q holds spaces or control characters; percent-encode them", ErrInvalid, path)
	case at.IsZero():
		return fmt.Errorf("%w: no time given; set a time or a delay", ErrInvalid)
	case at.Before(now.Add(-time.Second)):
		return fmt.Errorf("%w: time %s is in the past (now %s)", ErrInvalid, at.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case at.After(now.Add(MaxAhead)):
		return fmt.Errorf("%w: time %s is more than a year ahead", ErrInvalid, at.UTC().Format(time.RFC3339))
	}
	return nil
}

// Request is the JSON body an actor sends to the self-service endpoint,
// POST http://169.254.17.1/v1/alarms: exactly one of At (RFC 3339) and In
// (a Go duration such as "10m" or "90s"), and Path.
type Request struct {
	At   string `json:"at,omitempty"`
	In   string `json:"in,omitempty"`
	Path string `json:"path"`
}

// ParseRequest decodes body (a Request) and returns the alarm's due time,
// relative to now, and path, validated as Validate does. Errors wrap
// ErrInvalid.
func ParseRequest(now time.Time, body []byte) (at time.Time, path string, err error) {
	var r Request
	dec := json.NewDecoder(strings.NewReader(string(body)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return time.Time{}, "", fmt.Errorf(`%w: body is not {"at": RFC3339 | "in": duration, "path": "/…"}: %v`, ErrInvalid, err)
	}
	at, err = When(now, r.At, r.In)
	if err != nil {
		return time.Time{}, "", err
	}
	if err := Validate(now, at, r.Path); err != nil {
		return time.Time{}, "", err
	}
	return at, r.Path, nil
}

// When turns exactly one of at (RFC 3339) and in (a positive Go
// duration) into a due time relative to now. Errors wrap ErrInvalid.
func When(now time.Time, at, in string) (time.Time, error) {
	switch {
	case at != "" && in != "":
		return time.Time{}, fmt.Errorf("%w: give either a time (at) or a delay (in), not both", ErrInvalid)
	case at != "":
		t, err := time.Parse(time.RFC3339Nano, at)
		if err != nil {
			return time.Time{}, fmt.Errorf("%w: time %q is not RFC 3339 (like 2026-12-02T10:00:00Z)", ErrInvalid, at)
		}
		return t, nil
	case in != "":
		d, err := time.ParseDuration(in)
		if err != nil || d <= 0 {
			return time.Time{}, fmt.Errorf("%w: delay %q is not a positive duration (like 90s, 10m, 2h)", ErrInvalid, in)
		}
		return now.Add(d), nil
	}
	return time.Time{}, fmt.Errorf("%w: set a time (at, RFC 3339) or a delay (in, like 10m)", ErrInvalid)
}
