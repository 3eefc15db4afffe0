package apiserver

import (
	"fmt"
	"strings"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/names"
)

// Limits on a template, checked at the API edge.
const (
	maxEnv         = 256
	maxArgs        = 256
	maxArgBytes    = 64 << 10
	maxProbeSecond = 600
)

// validateTemplateSpec checks everything a node would otherwise trip over
// later, so a bad template fails at creation with a message naming the
// field. sandboxClass is the class this API server's workers run.
func validateTemplateSpec(spec *atev1.ActorTemplateSpec, sandboxClass string) error {
	if spec == nil {
		return fmt.Errorf("%w: template spec is required", errInvalid)
	}
	if n := len(spec.GetContainers()); n != 1 {
		return fmt.Errorf("%w: a template needs exactly one container for now, got %d", errInvalid, n)
	}
	c := spec.GetContainers()[0]
	if err := names.ValidateLabel("container name", c.GetName()); err != nil {
		return err
	}
	if _, err := image.ParseRef(c.GetImage()); err != nil {
		return fmt.Errorf("containers[0].image: %w", err)
	}
	if len(c.GetCommand())+len(c.GetArgs()) > maxArgs || len(c.GetEnv()) > maxEnv {
		return fmt.Errorf("%w: containers[0]: at most %d command+args and %d env entries", errInvalid, maxArgs, maxEnv)
	}
	size := 0
	for _, s := range append(c.GetCommand(), c.GetArgs()...) {
		size += len(s)
	}
	if size > maxArgBytes {
		return fmt.Errorf("%w: containers[0]: command and args exceed %d bytes", errInvalid, maxArgBytes)
	}
	for k := range c.GetEnv() {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("%w: containers[0].env: invalid variable name %q", errInvalid, k)
		}
	}
	for _, p := range c.GetPorts() {
		if p < 1 || p > 65535 {
			return fmt.Errorf("%w: containers[0].ports: %d is not a TCP port (1-65535)", errInvalid, p)
		}
	}
	if get := spec.GetWakeupProbe().GetHttpGet(); get != nil {
		if get.GetPort() < 1 || get.GetPort() > 65535 {
			return fmt.Errorf("%w: wakeupProbe.httpGet.port %d is not a TCP port", errInvalid, get.GetPort())
		}
		if p := get.GetPath(); p != "" && p[0] != '/' {
			return fmt.Errorf("%w: wakeupProbe.httpGet.path %q must start with /", errInvalid, p)
		}
	}
	if s := spec.GetWakeupProbe().GetTimeoutSeconds(); s < 0 || s > maxProbeSecond {
		return fmt.Errorf("%w: wakeupProbe.timeoutSeconds must be 0..%d", errInvalid, maxProbeSecond)
	}
	if c := spec.GetSandboxClass(); c != "" && c != sandboxClass {
		return fmt.Errorf("%w: sandboxClass %q: this installation runs %q workers", errInvalid, c, sandboxClass)
	}
	return nil
}
