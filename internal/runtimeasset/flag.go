package runtimeasset

import (
	"fmt"
	"strings"
)

// ParseFlag parses one flag value of the form ARCH=SHA256@URL into the
// Asset called name, e.g. for name "runsc":
//
//	amd64=0123…cdef@https://example.com/runsc
//
// ARCH is amd64 or arm64, SHA256 is 64 lowercase hex digits and URL is
// https://, http:// or file://. The URL is everything after the first @
// that follows the digest, so it may carry its own @ (user info). The
// error quotes the value and says which part is wrong and what it wants.
func ParseFlag(name, value string) (Asset, error) {
	arch, rest, ok := strings.Cut(value, "=")
	if !ok {
		return Asset{}, fmt.Errorf("%q: want ARCH=SHA256@URL, e.g. amd64=<64 hex digits>@https://host/runsc", value)
	}
	sum, url, ok := strings.Cut(rest, "@")
	if !ok {
		return Asset{}, fmt.Errorf("%q: no @URL after the digest: want ARCH=SHA256@URL", value)
	}
	a := Asset{Name: name, Architecture: arch, SHA256: sum, URL: url}
	if err := a.Validate(); err != nil {
		return Asset{}, fmt.Errorf("%q: %w", value, err)
	}
	return a, nil
}

// ParseFlags parses every value with ParseFlag and refuses two values for
// the same architecture (which of them would run is not for a flag order
// to decide). No values give a nil slice.
func ParseFlags(name string, values []string) ([]Asset, error) {
	var out []Asset
	seen := make(map[string]bool, len(values))
	for _, v := range values {
		a, err := ParseFlag(name, v)
		if err != nil {
			return nil, err
		}
		if seen[a.Architecture] {
			return nil, fmt.Errorf("%q: a second %s for %s: give one value per architecture", v, name, a.Architecture)
		}
		seen[a.Architecture] = true
		out = append(out, a)
	}
	return out, nil
}
