package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
)

// ImageInspector reads an image's configuration without unpacking it
// (image.Cache.Inspect), so a template naming an image that does not exist
// is refused at creation rather than FAILED by its golden build.
type ImageInspector interface {
	Inspect(ctx context.Context, atespace, ref string) (image.Config, error)
}

// inspectTimeout bounds reading an image's manifest and configuration
// (a registry round trip or two).
const inspectTimeout = 30 * time.Second

// errImageUnreadable marks an image that exists as far as we can tell but
// could not be read now (a registry down): retrying may help.
var errImageUnreadable = errors.New("image could not be read")

// imageDefaults checks that the template's image exists and, for a
// container that lists no ports, fills in the ports the image exposes
// (lowest first: the router sends traffic to the first), so `ate get
// template -o yaml` shows where traffic goes. Errors wrap errInvalid (no
// such image, no port anywhere, a probe on another port) or
// errImageUnreadable.
func imageDefaults(ctx context.Context, images ImageInspector, atespace string, spec *atev1.ActorTemplateSpec) error {
	if images == nil {
		return nil
	}
	c := spec.GetContainers()[0]
	ctx, cancel := context.WithTimeout(ctx, inspectTimeout)
	defer cancel()
	cfg, err := images.Inspect(ctx, atespace, c.GetImage())
	switch {
	case errors.Is(err, image.ErrNotFound), errors.Is(err, image.ErrBadRef), errors.Is(err, image.ErrAmbiguous), errors.Is(err, fs.ErrNotExist),
		errors.Is(err, image.ErrPathNotAllowed):
		return fmt.Errorf("%w: containers[0].image %q: %w", errInvalid, c.GetImage(), err)
	case errors.Is(err, image.ErrUnauthorized):
		return fmt.Errorf("%w: containers[0].image %q: %w; an operator gives atespace %s registry credentials with --registry-credentials",
			errInvalid, c.GetImage(), err, atespace)
	case err != nil:
		return fmt.Errorf("%w: containers[0].image %q: %w", errImageUnreadable, c.GetImage(), err)
	}
	if len(c.GetPorts()) == 0 {
		if len(cfg.ExposedPorts) == 0 {
			return fmt.Errorf("%w: containers[0].ports is empty and image %q exposes no port: list the port the actor serves on",
				errInvalid, c.GetImage())
		}
		for _, p := range cfg.ExposedPorts {
			c.Ports = append(c.Ports, int32(p))
		}
		// validateTemplateSpec checked the probe and hook ports against
		// listed ports only; these came from the image.
		if err := probeOnTrafficPort(spec); err != nil {
			return err
		}
		return validateRestore(spec)
	}
	return nil
}
