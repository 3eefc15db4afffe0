package image

import "errors"

// Errors callers can test with errors.Is. Everything else (I/O, registry and
// network failures) is returned wrapped as it came.
var (
	// ErrBadRef marks an image reference that cannot be parsed. It is a
	// caller mistake: retrying the same reference never helps.
	ErrBadRef = errors.New("malformed image reference")
	// ErrNotFound marks a reference whose tag, manifest or platform does not
	// exist in an OCI layout or archive.
	ErrNotFound = errors.New("image not found")
	// ErrAmbiguous marks an untagged oci: or oci-archive: reference to a
	// layout that holds more than one manifest.
	ErrAmbiguous = errors.New("ambiguous image reference")
	// ErrUnsafePath marks a layer entry that would be written outside the
	// root filesystem (path traversal, or a write through a symlink).
	ErrUnsafePath = errors.New("unsafe path in image layer")
)

// ErrPathNotAllowed marks an oci: or oci-archive: path outside every image
// root the cache allows (LocalRoots). It is the same whether or not the
// path exists.
var ErrPathNotAllowed = errors.New("image path not allowed")
