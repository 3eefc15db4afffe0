// Package names validates and parses the names Substrate uses everywhere:
// atespaces, templates, actors and workers are DNS-1123 labels, and an actor
// is addressed as "<atespace>/<name>" (ActorKey). API, router and CLI all
// validate here; store, lifecycle, API server and router carry ActorKey as
// the actor's identity, and Activity as what the router saw of it.
package names

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
)

// MaxLabelLength is the longest DNS-1123 label (RFC 1123 §2.1, 63 octets).
const MaxLabelLength = 63

// DefaultAtespace exists from the start and is used when none is given.
const DefaultAtespace = "default"

// ErrInvalid is wrapped by every validation error of this package.
var ErrInvalid = errors.New("invalid name")

// ValidateLabel reports whether s is a DNS-1123 label: 1–63 characters of
// [a-z0-9-], starting and ending with an alphanumeric. kind ("actor name",
// "atespace", …) names the field in the error, which wraps ErrInvalid.
func ValidateLabel(kind, s string) error {
	if s == "" {
		return fmt.Errorf("%w: %s must not be empty", ErrInvalid, kind)
	}
	if len(s) > MaxLabelLength {
		return fmt.Errorf("%w: %s %q is %d characters, at most %d allowed", ErrInvalid, kind, s, len(s), MaxLabelLength)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= '0' && c <= '9'
		if alnum || (c == '-' && i > 0 && i < len(s)-1) {
			continue
		}
		return fmt.Errorf("%w: %s %q must be a DNS-1123 label: lowercase letters, digits and '-', starting and ending with a letter or digit", ErrInvalid, kind, s)
	}
	return nil
}

// ActorKey is an actor's full name.
type ActorKey struct {
	Atespace string
	Name     string
}

// String returns "<atespace>/<name>".
func (k ActorKey) String() string { return k.Atespace + "/" + k.Name }

// IsZero reports whether k names no actor.
func (k ActorKey) IsZero() bool { return k == ActorKey{} }

// MarshalText returns "<atespace>/<name>", or nothing for the zero key,
// so records keep the string form they had before keys were typed.
func (k ActorKey) MarshalText() ([]byte, error) {
	if k.IsZero() {
		return nil, nil
	}
	return []byte(k.String()), nil
}

// UnmarshalText parses what MarshalText wrote: "<atespace>/<name>", or
// nothing for the zero key. It does not validate the labels (records were
// validated when written); use ParseActorKey for input.
func (k *ActorKey) UnmarshalText(b []byte) error {
	if len(b) == 0 {
		*k = ActorKey{}
		return nil
	}
	ns, name, ok := strings.Cut(string(b), "/")
	if !ok {
		return fmt.Errorf("%w: actor key %q is not <atespace>/<name>", ErrInvalid, b)
	}
	*k = ActorKey{Atespace: ns, Name: name}
	return nil
}

// LogValue implements slog.LogValuer: `"actor", key` logs a group of the
// actor's name and atespace (actor.name=…, actor.atespace=… in text); the
// zero key logs as an empty string.
func (k ActorKey) LogValue() slog.Value {
	if k.IsZero() {
		return slog.StringValue("")
	}
	return slog.GroupValue(slog.String("name", k.Name), slog.String("atespace", k.Atespace))
}

// Validate checks both labels.
func (k ActorKey) Validate() error {
	if err := ValidateLabel("atespace", k.Atespace); err != nil {
		return err
	}
	return ValidateLabel("actor name", k.Name)
}

// ParseActorKey parses "<atespace>/<name>", or "<name>" in defaultAtespace,
// and validates both parts.
func ParseActorKey(s, defaultAtespace string) (ActorKey, error) {
	k := ActorKey{Atespace: defaultAtespace, Name: s}
	if ns, name, ok := strings.Cut(s, "/"); ok {
		k = ActorKey{Atespace: ns, Name: name}
	}
	if err := k.Validate(); err != nil {
		return ActorKey{}, err
	}
	return k, nil
}

// ParseHost extracts the actor from a Host header of the form
// "<name>.<atespace>.<domain>[:port]". ok is false when host is not under
// domain or has not exactly two labels before it; err is set when it has but
// they are not valid labels.
func ParseHost(host, domain string) (k ActorKey, ok bool, err error) {
	if h, _, found := strings.Cut(host, ":"); found {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	suffix := "." + strings.ToLower(strings.Trim(domain, "."))
	if !strings.HasSuffix(host, suffix) {
		return ActorKey{}, false, nil
	}
	name, atespace, found := strings.Cut(strings.TrimSuffix(host, suffix), ".")
	if !found || strings.Contains(atespace, ".") {
		return ActorKey{}, false, nil
	}
	k = ActorKey{Atespace: atespace, Name: name}
	if err := k.Validate(); err != nil {
		return ActorKey{}, true, err
	}
	return k, true, nil
}
