package image

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"syscall"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// annotationRefName is the index.json annotation that carries an image's tag
// in an OCI layout (image-spec annotations.go).
const annotationRefName = "org.opencontainers.image.ref.name"

// platform is the only platform sandboxes run: multi-platform indexes are
// resolved to the linux image for the host's architecture.
var platform = v1.Platform{OS: "linux", Architecture: runtime.GOARCH}

// resolve opens the image r points to, a local one only under roots, a
// registry one with auth's credentials. The
// returned closer releases files the image reads lazily (the layout
// directory's root, the oci-archive tar) and must be called once the
// image's blobs are no longer read; it is never nil on success. For
// registry references ctx also bounds every later blob download of the
// image.
func resolve(ctx context.Context, r Ref, roots localRoots, auth authn.Keychain) (v1.Image, io.Closer, error) {
	switch r.Transport {
	case TransportOCI, TransportOCIArchive:
		return resolveLocal(r, roots)
	case TransportRegistry:
		rt := remote.DefaultTransport
		if t, ok := auth.(trustingKeychain); ok {
			rt = t.transport
		}
		img, err := remote.Image(r.Remote, remote.WithContext(ctx), remote.WithAuthFromKeychain(auth),
			remote.WithPlatform(platform), remote.WithTransport(httpsOnly{rt}))
		if err != nil {
			return nil, nil, registryError(r, err)
		}
		return img, noClose{}, nil
	}
	return nil, nil, fmt.Errorf("%w: unknown transport %q", ErrBadRef, r.Transport)
}

// httpsOnly refuses plain-HTTP requests to every registry but one on
// this machine's loopback. go-containerregistry falls back to HTTP for a
// registry on a private network (10/8, 172.16/12, 192.168/16) when HTTPS
// fails or is slow; whoever answers on the path would then get an
// atespace's credentials in clear, and serve a tag whatever image it
// likes.
type httpsOnly struct{ next http.RoundTripper }

func (h httpsOnly) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Scheme != "https" && !isLoopback(r.URL.Hostname()) {
		return nil, fmt.Errorf("registry %s: plain HTTP refused: pulls use HTTPS (only a registry on this machine's loopback is reached over HTTP); give the registry a certificate, and if your own CA issued it, put that CA in ca.crt of --registry-credentials", r.URL.Host)
	}
	return h.next.RoundTrip(r)
}

func isLoopback(host string) bool {
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// registryError classifies a failed registry fetch of r: a refusal of
// the credentials (ErrUnauthorized), a host that does not exist
// (ErrNotFound: the template author's mistake), else a fetch error
// worth retrying. A DNS error loses its resolver's address, which is
// this machine's business, not the template author's.
func registryError(r Ref, err error) error {
	if refused(err) {
		return fmt.Errorf("%w: %s: %w", ErrUnauthorized, r.Remote.Name(), err)
	}
	var unknownCA x509.UnknownAuthorityError
	if errors.As(err, &unknownCA) {
		return fmt.Errorf("fetch %s: %w (the registry's certificate is not from a trusted CA: if your own CA issued it, an operator puts that CA in ca.crt of --registry-credentials)", r.Remote.Name(), err)
	}
	var dns *net.DNSError
	if errors.As(err, &dns) {
		dns.Server = ""
		if dns.IsNotFound {
			return fmt.Errorf("%w: registry host %s does not exist (%w)", ErrNotFound, r.Remote.Context().RegistryStr(), err)
		}
	}
	return fmt.Errorf("fetch %s: %w", r.Remote.Name(), err)
}

// noClose is the closer of images that hold nothing open.
type noClose struct{}

func (noClose) Close() error { return nil }

// pickImage selects the manifest r names from a layout's index.json: the
// one tagged r.Tag, or the only one when r.Tag is empty. A selected index
// (a multi-platform image) is narrowed to this host's platform.
func pickImage(idx v1.ImageIndex, r Ref) (v1.Image, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("read index of %s: %w", r, err)
	}
	var found []v1.Descriptor
	for _, d := range im.Manifests {
		if r.Tag == "" || d.Annotations[annotationRefName] == r.Tag {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 0 && r.Tag == "":
		return nil, fmt.Errorf("%w: %s: layout has no manifests", ErrNotFound, r)
	case len(found) == 0:
		return nil, fmt.Errorf("%w: %s: no manifest tagged %q (tags: %s)", ErrNotFound, r, r.Tag, tags(im))
	case len(found) > 1 && r.Tag == "":
		return nil, fmt.Errorf("%w: %s: layout has %d manifests, add :TAG (tags: %s)", ErrAmbiguous, r, len(found), tags(im))
	case len(found) > 1:
		return nil, fmt.Errorf("%w: %s: %d manifests tagged %q", ErrAmbiguous, r, len(found), r.Tag)
	}
	return imageFor(idx, found[0], r)
}

// imageFor opens the image desc describes, descending through nested
// indexes (at most a few levels: layouts written by `skopeo copy --all` hold
// an index of per-platform manifests) to the one for this host's platform.
func imageFor(idx v1.ImageIndex, desc v1.Descriptor, r Ref) (v1.Image, error) {
	for depth := 0; depth < 4; depth++ {
		if !desc.MediaType.IsIndex() {
			img, err := idx.Image(desc.Digest)
			if err != nil {
				return nil, fmt.Errorf("open image %s in %s: %w", desc.Digest, r, err)
			}
			return img, nil
		}
		child, err := idx.ImageIndex(desc.Digest)
		if err != nil {
			return nil, fmt.Errorf("open index %s in %s: %w", desc.Digest, r, err)
		}
		im, err := child.IndexManifest()
		if err != nil {
			return nil, fmt.Errorf("read index %s in %s: %w", desc.Digest, r, err)
		}
		i := slices.IndexFunc(im.Manifests, func(d v1.Descriptor) bool {
			return d.Platform != nil && d.Platform.OS == platform.OS && d.Platform.Architecture == platform.Architecture
		})
		if i < 0 {
			return nil, fmt.Errorf("%w: %s: no manifest for %s/%s in index %s", ErrNotFound, r, platform.OS, platform.Architecture, desc.Digest)
		}
		idx, desc = child, im.Manifests[i]
	}
	return nil, fmt.Errorf("%w: %s: indexes nested too deeply", ErrNotFound, r)
}

// tags lists the ref.name annotations of a layout's manifests for error
// messages.
func tags(im *v1.IndexManifest) string {
	var ts []string
	for _, d := range im.Manifests {
		if t := d.Annotations[annotationRefName]; t != "" {
			ts = append(ts, t)
		}
	}
	if len(ts) == 0 {
		return "none"
	}
	return strings.Join(ts, ", ")
}

// resolveLocal opens an oci: layout or oci-archive: file under roots.
func resolveLocal(r Ref, roots localRoots) (_ v1.Image, _ io.Closer, err error) {
	root, rel, err := roots.openRoot(r)
	if err != nil {
		return nil, nil, err
	}
	var src interface {
		layoutSource
		io.Closer
	}
	if r.Transport == TransportOCI {
		src = &dirLayout{root: root, dir: rel, name: r.Path}
	} else {
		f, _, err := openRegular(root, rel)
		_ = root.Close() // f stays open without it
		switch {
		case errors.Is(err, fs.ErrNotExist), errors.Is(err, errNotRegular), errors.Is(err, syscall.ENOTDIR):
			return nil, nil, fmt.Errorf("%w: no OCI image archive at %s (%w)", ErrNotFound, r.Path, err)
		case err != nil:
			return nil, nil, fmt.Errorf("open oci archive %s: %w", r.Path, err)
		}
		if src, err = openArchive(f, r.Path); err != nil {
			return nil, nil, err
		}
	}
	defer func() {
		if err != nil {
			_ = src.Close()
		}
	}()
	idx, err := layoutIndex(src)
	if err != nil {
		if r.Transport == TransportOCI && errors.Is(err, ErrNotFound) {
			return nil, nil, fmt.Errorf("%w: no OCI image layout at %s (%w)", ErrNotFound, r.Path, err)
		}
		return nil, nil, err
	}
	img, err := pickImage(idx, r)
	if err != nil {
		return nil, nil, err
	}
	return img, src, nil
}
