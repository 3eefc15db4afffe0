// Package image resolves OCI image references, unpacks their flattened root
// filesystems into a digest-addressed cache for sandboxes to run from, and
// packs host directories into single-layer OCI images (for examples and
// tests). It talks to registries through go-containerregistry and needs no
// container engine.
package image

import (
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Transport says where an image reference points, named as skopeo names it.
type Transport string

const (
	// TransportOCI is an OCI image layout directory: "oci:PATH[:TAG]".
	TransportOCI Transport = "oci"
	// TransportOCIArchive is a tar file holding an OCI image layout:
	// "oci-archive:PATH[:TAG]".
	TransportOCIArchive Transport = "oci-archive"
	// TransportRegistry is an image in an OCI distribution registry, written
	// as "registry/repo:tag", "repo@sha256:…" or (skopeo style) with a
	// "docker://" prefix.
	TransportRegistry Transport = "docker"
)

// Ref is a parsed image reference. The zero value is not valid; use
// ParseRef.
type Ref struct {
	Transport Transport
	// Path is the layout directory (oci) or archive file (oci-archive), as
	// written: a relative path is relative to the process's working
	// directory when the image is opened. Empty for registry references.
	Path string
	// Tag selects the manifest whose org.opencontainers.image.ref.name
	// annotation equals it (oci, oci-archive). Empty means "the only
	// manifest in index.json".
	Tag string
	// Remote is the registry reference (registry transport only).
	Remote name.Reference
}

// String returns the reference in the form ParseRef accepts; registry
// references come back fully qualified (e.g. index.docker.io/library/x:latest).
func (r Ref) String() string {
	switch r.Transport {
	case TransportOCI, TransportOCIArchive:
		if r.Tag == "" {
			return string(r.Transport) + ":" + r.Path
		}
		return string(r.Transport) + ":" + r.Path + ":" + r.Tag
	case TransportRegistry:
		if r.Remote == nil {
			return ""
		}
		return r.Remote.Name()
	}
	return ""
}

// refSyntax is appended to parse errors so a user who typed an unsupported
// transport (dir:, docker-archive:, …) sees what is supported.
const refSyntax = "want oci:PATH[:TAG], oci-archive:PATH[:TAG] or a registry reference such as registry.example/repo:tag"

// ParseRef parses an image reference:
//
//	oci:PATH[:TAG]          OCI image layout directory
//	oci-archive:PATH[:TAG]  tar of an OCI image layout
//	[docker://]NAME         registry reference (name.ParseReference rules:
//	                        "alpine" means index.docker.io/library/alpine:latest)
//
// As in skopeo, PATH ends at the first ':', so layout paths cannot contain
// one. Errors wrap ErrBadRef and name the problem.
func ParseRef(s string) (Ref, error) {
	if s == "" {
		return Ref{}, fmt.Errorf("%w: empty reference (%s)", ErrBadRef, refSyntax)
	}
	for _, t := range []Transport{TransportOCIArchive, TransportOCI} {
		rest, ok := strings.CutPrefix(s, string(t)+":")
		if !ok {
			continue
		}
		path, tag, hasTag := strings.Cut(rest, ":")
		if path == "" {
			return Ref{}, fmt.Errorf("%w: %q: empty path after %q", ErrBadRef, s, string(t)+":")
		}
		if hasTag && tag == "" {
			return Ref{}, fmt.Errorf("%w: %q: empty tag after ':'", ErrBadRef, s)
		}
		return Ref{Transport: t, Path: path, Tag: tag}, nil
	}
	remote := strings.TrimPrefix(s, "docker://")
	if remote == "" {
		return Ref{}, fmt.Errorf("%w: %q: empty registry reference", ErrBadRef, s)
	}
	// name.ParseReference takes "dir:/tmp/x" for registry "dir:" and repo
	// "tmp/x"; a colon followed by a slash is a transport we do not
	// support, never a port or a tag.
	if t, rest, ok := strings.Cut(remote, ":"); ok && (strings.HasPrefix(rest, "/") || unsupportedTransports[t]) {
		return Ref{}, fmt.Errorf("%w: %q: unsupported transport %q (%s)", ErrBadRef, s, t, refSyntax)
	}
	ref, err := name.ParseReference(remote)
	if err != nil {
		return Ref{}, fmt.Errorf("%w: %q: %w (%s)", ErrBadRef, s, parseDetail(remote, err), refSyntax)
	}
	return Ref{Transport: TransportRegistry, Remote: ref}, nil
}

// unsupportedTransports are skopeo transports a user may reasonably try.
var unsupportedTransports = map[string]bool{
	"dir": true, "docker-archive": true, "docker-daemon": true,
	"containers-storage": true, "ostree": true, "sif": true,
}

// parseDetail replaces name.ParseReference's "could not parse reference"
// with the reason from the parser for the form s has (digest if it holds
// an '@', tag otherwise).
func parseDetail(s string, err error) error {
	var detail error
	if strings.Contains(s, "@") {
		_, detail = name.NewDigest(s)
	} else {
		_, detail = name.NewTag(s)
	}
	if detail != nil {
		return detail
	}
	return err
}
