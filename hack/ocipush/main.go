// Command ocipush pushes an OCI image layout's image, or its
// multi-platform image index with every platform's image, to a registry,
// without a container engine:
//
//	go run ./hack/ocipush --layout build/images/ate \
//	    --ref registry.example.com/ate/ate:0.1.0 --ref-file build/images/pushed/ate.ref
//
// It prints the pushed reference by digest (registry.example.com/ate/ate@sha256:…),
// the digest of the layout's own index or manifest, and writes the same
// line to --ref-file. `make image-push` (hack/push-images.sh) runs it.
//
// Credentials are Docker's: the `auths` entry (or credential helper) for
// the registry in $DOCKER_CONFIG/config.json, else ~/.docker/config.json
// (as `docker login` writes it; Podman's auth.json and $REGISTRY_AUTH_FILE
// are read when there is no Docker config). TLS trusts the system's roots,
// which SSL_CERT_FILE and SSL_CERT_DIR replace, plus --ca-file. A registry
// on loopback or a private network may be answered over plain HTTP when
// HTTPS fails, as go-containerregistry does for such hosts.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// annotationRefName is the index.json annotation holding a layout's tags.
const annotationRefName = "org.opencontainers.image.ref.name"

type options struct {
	layout    string // OCI layout directory
	layoutTag string // which of its manifests, when it holds several
	ref       string // REGISTRY/REPO[:TAG] to push to
	refFile   string // where to write the pushed REGISTRY/REPO@DIGEST
	caFile    string // PEM CA certificates trusted besides the system's
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocipush:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "ocipush:", err)
		os.Exit(1)
	}
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("ocipush", flag.ContinueOnError)
	fs.StringVar(&o.layout, "layout", "", "OCI image layout directory to push (required)")
	fs.StringVar(&o.layoutTag, "layout-tag", "", "the layout's manifest or index with this ref.name, when it holds several")
	fs.StringVar(&o.ref, "ref", "", "REGISTRY/REPOSITORY[:TAG] to push to (required; TAG defaults to latest)")
	fs.StringVar(&o.refFile, "ref-file", "", "also write the pushed REGISTRY/REPOSITORY@DIGEST to this file")
	fs.StringVar(&o.caFile, "ca-file", "", "PEM file of CA certificates to trust besides the system's")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	switch {
	case fs.NArg() > 0:
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	case o.layout == "":
		return o, errors.New("--layout is required")
	case o.ref == "":
		return o, errors.New("--ref is required")
	}
	return o, nil
}

// run pushes o.layout to o.ref and reports the pushed digest reference
// on stdout (and in o.refFile), progress on stderr.
func run(ctx context.Context, o options, stdout, stderr io.Writer) error {
	tag, err := name.NewTag(o.ref)
	if err != nil {
		return fmt.Errorf("--ref %q: %w (want REGISTRY/REPOSITORY[:TAG], e.g. registry.example.com/ate/ate:0.1.0)", o.ref, err)
	}
	ii, desc, err := pick(o.layout, o.layoutTag)
	if err != nil {
		return err
	}
	tr, err := newTransport(o.caFile)
	if err != nil {
		return err
	}
	auth, err := authn.DefaultKeychain.Resolve(tag.Context())
	if err != nil {
		return fmt.Errorf("read the credentials for %s from %s: %w", tag.RegistryStr(), configFile(), err)
	}
	updates := make(chan v1.Update, 16)
	done := make(chan struct{})
	go func() {
		defer close(done)
		report(stderr, updates)
	}()
	opts := []remote.Option{
		remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(tr),
		remote.WithUserAgent("ate-ocipush"), remote.WithProgress(updates),
	}
	what := "image"
	if desc.MediaType.IsIndex() {
		what = "index"
	}
	fmt.Fprintf(stderr, "ocipush: pushing %s (%s %s) to %s\n", o.layout, what, desc.Digest, tag)
	start := time.Now()
	if desc.MediaType.IsIndex() {
		var idx v1.ImageIndex
		if idx, err = ii.ImageIndex(desc.Digest); err == nil {
			err = remote.WriteIndex(tag, idx, opts...)
		}
	} else {
		var img v1.Image
		if img, err = ii.Image(desc.Digest); err == nil {
			err = remote.Write(tag, img, opts...)
		} else {
			close(updates) // remote.Write closes it, when it runs
		}
	}
	if err != nil {
		// Not waiting for report: a push that failed before it started
		// leaves updates open.
		return explain(err, tag, auth)
	}
	<-done
	// What the registry now serves for the tag must be what was pushed.
	got, err := remote.Head(tag, remote.WithContext(ctx), remote.WithAuth(auth), remote.WithTransport(tr), remote.WithUserAgent("ate-ocipush"))
	if err != nil {
		return fmt.Errorf("pushed, but reading %s back failed: %w", tag, explain(err, tag, auth))
	}
	if got.Digest != desc.Digest {
		return fmt.Errorf("pushed %s, but %s now names %s (another push to the tag at the same time?)", desc.Digest, tag, got.Digest)
	}
	pushed := tag.Context().Digest(desc.Digest.String()).String()
	fmt.Fprintf(stderr, "ocipush: pushed %s in %s\n", tag, time.Since(start).Round(100*time.Millisecond))
	if o.refFile != "" {
		if err := writeFile(o.refFile, pushed+"\n"); err != nil {
			return err
		}
	}
	_, err = fmt.Fprintln(stdout, pushed)
	return err
}

// pick opens the layout at dir and selects its manifest or index: the
// only one, or the one tagged tag.
func pick(dir, tag string) (v1.ImageIndex, v1.Descriptor, error) {
	ii, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("open OCI layout %s: %w (build it with `make image`)", dir, err)
	}
	im, err := ii.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, fmt.Errorf("read %s/index.json: %w", dir, err)
	}
	var found []v1.Descriptor
	var tags []string
	for _, d := range im.Manifests {
		tags = append(tags, d.Annotations[annotationRefName])
		if tag == "" || d.Annotations[annotationRefName] == tag {
			found = append(found, d)
		}
	}
	switch {
	case len(found) == 1:
		return ii, found[0], nil
	case tag == "" && len(found) == 0:
		return nil, v1.Descriptor{}, fmt.Errorf("%s holds no image", dir)
	case tag == "":
		return nil, v1.Descriptor{}, fmt.Errorf("%s holds %d manifests (tags %q): choose one with --layout-tag", dir, len(found), tags)
	default:
		return nil, v1.Descriptor{}, fmt.Errorf("%s holds %d manifests tagged %q (tags %q)", dir, len(found), tag, tags)
	}
}

// newTransport is go-containerregistry's default transport, trusting the
// system's roots plus caFile's certificates.
func newTransport(caFile string) (http.RoundTripper, error) {
	tr := remote.DefaultTransport.(*http.Transport).Clone()
	if caFile == "" {
		return tr, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("--ca-file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("--ca-file %s: no PEM certificate in it", caFile)
	}
	if tr.TLSClientConfig == nil {
		tr.TLSClientConfig = &tls.Config{}
	}
	tr.TLSClientConfig.RootCAs = pool
	return tr, nil
}

// explain turns a failed registry call into what to do about it: the
// registry refusing anonymous access or the credentials it was given, or
// a certificate this machine does not trust.
func explain(err error, tag name.Tag, auth authn.Authenticator) error {
	reg := tag.RegistryStr()
	var terr *transport.Error
	if errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden) {
		if auth == authn.Anonymous {
			return fmt.Errorf("%s refused an anonymous push to %s (%w).\n"+
				"No credentials for %s in %s. Log in first (`docker login %s`),\n"+
				"or add an entry for it to that file's \"auths\":\n"+
				"  {\"auths\": {\"%s\": {\"auth\": \"<base64 of USER:PASSWORD>\"}}}\n"+
				"(DOCKER_CONFIG=DIR reads DIR/config.json instead of ~/.docker/config.json)",
				reg, tag.Context(), err, reg, configFile(), reg, reg)
		}
		if terr.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("%s refused the credentials for it in %s (%w): wrong user or password, or an expired token; log in again (`docker login %s`)",
				reg, configFile(), err, reg)
		}
		return fmt.Errorf("%s denied the push to %s with the credentials in %s (%w): that account may not push to this repository; ask for push access or choose a repository it owns (REGISTRY=%s/PREFIX)",
			reg, tag.Context(), configFile(), err, reg)
	}
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	if errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid) {
		return fmt.Errorf("%w\nThis machine does not trust %s's TLS certificate. If the registry's CA is private, set SSL_CERT_FILE to a PEM bundle that includes it (ocipush also takes --ca-file CA.pem)",
			err, reg)
	}
	return fmt.Errorf("push to %s: %w", tag, err)
}

// configFile is the Docker config file the keychain reads.
func configFile() string {
	if d := os.Getenv("DOCKER_CONFIG"); d != "" {
		return filepath.Join(d, "config.json")
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "~/.docker/config.json"
	}
	return filepath.Join(home, ".docker", "config.json")
}

// report prints the push's progress every 5 s and when it is complete,
// until updates is closed. Errors are run's to report.
func report(w io.Writer, updates <-chan v1.Update) {
	last, printed := time.Now(), int64(-1)
	for u := range updates {
		if u.Error != nil || u.Total == 0 || u.Complete == printed {
			continue
		}
		if u.Complete != u.Total && time.Since(last) < 5*time.Second {
			continue
		}
		last, printed = time.Now(), u.Complete
		fmt.Fprintf(w, "ocipush: %d of %d MiB sent\n", u.Complete>>20, u.Total>>20)
	}
}

// writeFile replaces path with data atomically, making its directory.
func writeFile(path, data string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
