package snapshot

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"strings"
)

// A reference as Commit, Import and Clone return it, and as records keep
// it, is "<owner>/<id>@sha256:<hex>": the snapshot's place in the store
// and the SHA-256 of its manifest's bytes. The manifest lists every
// file's size (and, in the S3 store, SHA-256), so the digest pins the
// whole snapshot to what was committed: whoever can write to the store
// but not to the record store (a node holding bucket-wide keys) cannot
// substitute another actor's snapshot, manifest and all, without Open
// refusing it (docs/security.md, Snapshot integrity). The digest travels
// inside the reference, like an image's "name@sha256:…", so the pointer
// and its digest are one string: every record, node request, tag, fork
// and golden snapshot that carries one carries both.
//
// A reference without a digest ("<owner>/<id>", written before digests
// existed) is still opened, checked against its manifest only.
const digestSep = "@"

// digestPrefix names the algorithm of every digest this package writes.
const digestPrefix = "sha256:"

// ManifestDigest returns the digest of manifest bytes, "sha256:<hex>".
func ManifestDigest(data []byte) string {
	sum := sha256.Sum256(data)
	return digestPrefix + hex.EncodeToString(sum[:])
}

// WithDigest returns ref (bare, "<owner>/<id>") with the digest of its
// manifest bytes: the reference to record.
func WithDigest(ref string, manifest []byte) string {
	return ref + digestSep + ManifestDigest(manifest)
}

// ParseRef splits a reference into its bare "<owner>/<id>" and its
// manifest digest ("" for a reference recorded without one). A malformed
// reference or digest is an error wrapping ErrNotFound, as SplitRef's.
func ParseRef(ref string) (bare, digest string, err error) {
	bare, digest, _ = strings.Cut(ref, digestSep)
	if _, _, err := splitBare(bare); err != nil {
		return "", "", err
	}
	if digest != "" || strings.Contains(ref, digestSep) {
		h, ok := strings.CutPrefix(digest, digestPrefix)
		if _, herr := hex.DecodeString(h); !ok || herr != nil || len(h) != 2*sha256.Size {
			return "", "", fmt.Errorf("%w: malformed digest in reference %q", ErrNotFound, ref)
		}
	}
	return bare, digest, nil
}

// Bare returns ref without its digest: the snapshot's place in the
// store, as List returns it.
func Bare(ref string) string {
	bare, _, _ := strings.Cut(ref, digestSep)
	return bare
}

// VerifyDigest checks manifest bytes read for ref against the digest
// ref records; a reference without one passes. A mismatch wraps
// ErrCorrupt and says that the snapshot changed after it was recorded.
func VerifyDigest(ref string, manifest []byte) error {
	_, want, err := ParseRef(ref)
	if err != nil || want == "" {
		return err
	}
	got := ManifestDigest(manifest)
	if subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		return fmt.Errorf("%w: %s: manifest digest %s is not the recorded %s: the snapshot was rewritten after it was recorded; refusing it",
			ErrCorrupt, Bare(ref), got, want)
	}
	return nil
}
