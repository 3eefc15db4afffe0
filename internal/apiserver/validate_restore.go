package apiserver

import (
	"fmt"
	"slices"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/lifecycle"
)

// maxRestoreHookSeconds bounds onRestore.timeoutSeconds: the hook runs
// while the request that woke the actor waits, so minutes are already
// generous.
const maxRestoreHookSeconds = 300

// validateRestore checks the template's onRestore hook and newActors
// (docs/restore.md). Errors wrap errInvalid and name the field. A hook
// port is checked against the ports the container lists; one without
// listed ports may use any, as the image's exposed ports are not known
// here.
func validateRestore(spec *atev1.ActorTemplateSpec) error {
	switch v := spec.GetNewActors(); v {
	case "", lifecycle.NewActorsGolden, lifecycle.NewActorsColdBoot:
	default:
		return fmt.Errorf("%w: newActors must be %s or %s, got %q", errInvalid,
			lifecycle.NewActorsGolden, lifecycle.NewActorsColdBoot, v)
	}
	hook := spec.GetOnRestore()
	if hook == nil {
		return nil
	}
	post := hook.GetHttpPost()
	if post == nil {
		return fmt.Errorf("%w: onRestore.httpPost is required when onRestore is set", errInvalid)
	}
	if p := post.GetPath(); p == "" || p[0] != '/' {
		return fmt.Errorf("%w: onRestore.httpPost.path %q must start with /", errInvalid, p)
	}
	port := post.GetPort()
	if port < 1 || port > 65535 {
		return fmt.Errorf("%w: onRestore.httpPost.port %d is not a TCP port (1-65535)", errInvalid, port)
	}
	if ports := spec.GetContainers()[0].GetPorts(); len(ports) > 0 && !slices.Contains(ports, port) {
		return fmt.Errorf("%w: onRestore.httpPost.port %d is not one of containers[0].ports %v", errInvalid, port, ports)
	}
	if s := hook.GetTimeoutSeconds(); s < 0 || s > maxRestoreHookSeconds {
		return fmt.Errorf("%w: onRestore.timeoutSeconds must be 0..%d, got %d", errInvalid, maxRestoreHookSeconds, s)
	}
	return nil
}
