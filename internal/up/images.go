package up

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/node"
)

// Default image roots (--image-root): the only directories oci: and
// oci-archive: template images may be read from (image.LocalRoots).
const (
	// DefaultUpImageRoot is `ate up`'s, relative to the directory it
	// starts in: where hack/build-examples.sh writes the examples' images,
	// which the examples' templates name (oci:build/images/counter).
	DefaultUpImageRoot = "build/images"
	// DefaultImageRoot is `ate apiserver`'s and `ate node`'s: where the
	// ate container image carries the example images.
	DefaultImageRoot = "/images"
	// DefaultRegistryCredentials (--registry-credentials): pulls are
	// anonymous unless the operator says whose credentials to use.
	DefaultRegistryCredentials = image.CredentialsAnonymous
)

// newImageCache is the image cache under dataDir/images, reading local
// images only under roots (made absolute against the working directory),
// or anywhere when roots is nil (tests and embedders; the commands always
// pass their --image-root), pulling from registries with creds'
// credentials (image.ParseCredentials).
func newImageCache(dataDir string, roots []string, creds string, log *slog.Logger) (*image.Cache, error) {
	rc, err := image.ParseCredentials(creds)
	if err != nil {
		return nil, err
	}
	log.Info("registry credentials", "credentials", rc.String())
	opts := []image.Option{image.RegistryCredentials(rc)}
	if roots != nil {
		abs, err := image.AbsRoots(roots)
		if err != nil {
			return nil, err
		}
		opts = append(opts, image.LocalRoots(abs))
		log.Info("image roots", "roots", abs)
	}
	return image.NewCache(filepath.Join(dataDir, "images"), log, opts...), nil
}

// checkRegistryCredentials refuses, before anything is written, a
// --registry-credentials value image.ParseCredentials would refuse.
func checkRegistryCredentials(creds string) error {
	if _, err := image.ParseCredentials(creds); err != nil {
		return fmt.Errorf("--registry-credentials: %w", err)
	}
	return nil
}

// checkNodeSettings is checkRegistryCredentials and the volume limits
// (--max-volume-bytes, --max-volume-entries) of a node's settings.
func checkNodeSettings(creds string, nc node.Config) error {
	if err := checkRegistryCredentials(creds); err != nil {
		return err
	}
	if err := nc.VolumeLimits.Validate(); err != nil {
		return fmt.Errorf("--max-volume-bytes, --max-volume-entries: %w", err)
	}
	return nil
}
