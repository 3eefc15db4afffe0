package apiserver

import (
	"fmt"
	"path"
	"strings"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/auth"
	"substrate.dev/ate/internal/checkpoint"
	"substrate.dev/ate/internal/egress"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/names"
	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/streams"
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
		if err := probeOnTrafficPort(spec); err != nil {
			return err
		}
	}
	if s := spec.GetWakeupProbe().GetTimeoutSeconds(); s < 0 || s > maxProbeSecond {
		return fmt.Errorf("%w: wakeupProbe.timeoutSeconds must be 0..%d", errInvalid, maxProbeSecond)
	}
	switch v := spec.GetWakeupProbe().GetAfterRestore(); v {
	case "", atev1.ProbeAfterRestoreProbe, atev1.ProbeAfterRestoreSkip:
	default:
		return fmt.Errorf("%w: wakeupProbe.afterRestore %q: want %s (the default) or %s", errInvalid,
			v, atev1.ProbeAfterRestoreProbe, atev1.ProbeAfterRestoreSkip)
	}
	if c := spec.GetSandboxClass(); c != "" && c != sandboxClass {
		return fmt.Errorf("%w: sandboxClass %q: this installation runs %q workers", errInvalid, c, sandboxClass)
	}
	if err := validateVolumes(spec); err != nil {
		return err
	}
	if err := validatePolicies(spec); err != nil {
		return err
	}
	if _, err := egress.FromProto(spec.GetNetwork()); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	return nil
}

// probeOnTrafficPort checks that an HTTP wakeup probe checks a port the
// container lists, and when more than one, the first: the router sends
// all traffic to the first port, so a probe passing on another port would
// mark READY an actor whose every request fails. A container without
// ports is checked after its image's exposed ports are filled in
// (imageDefaults).
func probeOnTrafficPort(spec *atev1.ActorTemplateSpec) error {
	get := spec.GetWakeupProbe().GetHttpGet()
	ports := spec.GetContainers()[0].GetPorts()
	if get == nil || len(ports) == 0 || get.GetPort() == ports[0] {
		return nil
	}
	return fmt.Errorf("%w: wakeupProbe.httpGet.port %d is not the port traffic goes to (containers[0].ports[0] = %d): "+
		"the router sends requests to the first listed port, so probe that one", errInvalid, get.GetPort(), ports[0])
}

// maxVolumes bounds a template's durable volumes.
const maxVolumes = 16

func validateVolumes(spec *atev1.ActorTemplateSpec) error {
	if len(spec.GetVolumes()) > maxVolumes {
		return fmt.Errorf("%w: at most %d volumes", errInvalid, maxVolumes)
	}
	vols := map[string]bool{}
	for i, v := range spec.GetVolumes() {
		if err := names.ValidateLabel(fmt.Sprintf("volumes[%d].name", i), v.GetName()); err != nil {
			return err
		}
		if vols[v.GetName()] {
			return fmt.Errorf("%w: volume %q declared twice", errInvalid, v.GetName())
		}
		vols[v.GetName()] = true
	}
	paths := map[string]bool{}
	for i, vm := range spec.GetContainers()[0].GetVolumeMounts() {
		p := vm.GetMountPath()
		switch {
		case !vols[vm.GetName()]:
			return fmt.Errorf("%w: containers[0].volumeMounts[%d]: no volume %q in volumes", errInvalid, i, vm.GetName())
		case !path.IsAbs(p) || path.Clean(p) != p || p == "/":
			return fmt.Errorf("%w: containers[0].volumeMounts[%d].mountPath %q must be a clean absolute path other than /", errInvalid, i, p)
		case p == "/run/ate" || strings.HasPrefix(p, "/run/ate/") || p == "/proc" || p == "/dev" || p == "/sys":
			return fmt.Errorf("%w: containers[0].volumeMounts[%d].mountPath %q is reserved", errInvalid, i, p)
		case paths[p]:
			return fmt.Errorf("%w: containers[0].volumeMounts: %q mounted twice", errInvalid, p)
		}
		paths[p] = true
	}
	return nil
}

// maxTimeoutSeconds bounds template timeouts (a day).
const maxTimeoutSeconds = 86400

// maxEvictionPriority bounds eviction.priority either way; the range only
// keeps typos (a stray digit) visible.
const maxEvictionPriority = 1000

func validatePolicies(spec *atev1.ActorTemplateSpec) error {
	sp := spec.GetSnapshotPolicy()
	onPause, err := snapshot.ParseScope(sp.GetOnPause())
	if err != nil {
		return fmt.Errorf("%w: snapshotPolicy.onPause: %w", errInvalid, err)
	}
	onSuspend, err := snapshot.ParseScope(sp.GetOnSuspend())
	if err != nil {
		return fmt.Errorf("%w: snapshotPolicy.onSuspend: %w", errInvalid, err)
	}
	if onPause == snapshot.ScopeData && onSuspend != snapshot.ScopeData {
		return fmt.Errorf("%w: snapshotPolicy.onSuspend must not hold more than onPause: with onPause Data, set onSuspend Data", errInvalid)
	}
	for field, v := range map[string]int32{"drainGraceSeconds": spec.GetDrainGraceSeconds(),
		"routeTimeoutSeconds": spec.GetRouteTimeoutSeconds(), "streamIdleTimeoutSeconds": spec.GetStreamIdleTimeoutSeconds()} {
		if v < 0 || v > maxTimeoutSeconds {
			return fmt.Errorf("%w: %s must be 0..%d", errInvalid, field, maxTimeoutSeconds)
		}
	}
	if err := validateRestore(spec); err != nil {
		return err
	}
	if ev := spec.GetEviction(); ev != nil {
		if s := ev.GetMinRunSeconds(); s < 0 || s > maxTimeoutSeconds {
			return fmt.Errorf("%w: eviction.minRunSeconds must be 0..%d", errInvalid, maxTimeoutSeconds)
		}
		if p := ev.GetPriority(); p < -maxEvictionPriority || p > maxEvictionPriority {
			return fmt.Errorf("%w: eviction.priority must be -%d..%d", errInvalid, maxEvictionPriority, maxEvictionPriority)
		}
	}
	if idle := spec.GetIdle(); idle.GetAfter() != "" {
		d, err := time.ParseDuration(idle.GetAfter())
		if err != nil || d < 0 {
			return fmt.Errorf("%w: idle.after %q is not a duration like 10m", errInvalid, idle.GetAfter())
		}
		// No action means suspend (checkpoint.ParseAction), as the
		// router and eviction read it.
		if _, err := checkpoint.ParseAction(idle.GetAction()); d > 0 && err != nil {
			return fmt.Errorf("%w: idle.action: %w", errInvalid, err)
		}
	}
	if _, err := lifecycle.ParseTTL(spec.GetTtl().GetDeleteAfterIdle()); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	if _, err := streams.Parse(spec.GetStreams().GetIdle(), spec.GetStreams().GetWakeOn()); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	if _, err := auth.ParseIngressPolicy(spec.GetIngress().GetPolicy()); err != nil {
		return fmt.Errorf("%w: %w", errInvalid, err)
	}
	return nil
}
