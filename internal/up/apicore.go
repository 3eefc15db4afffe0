package up

import (
	"context"
	"log/slog"

	"substrate.dev/ate/internal/alarm"
	"substrate.dev/ate/internal/apiserver"
	"substrate.dev/ate/internal/identity"
	"substrate.dev/ate/internal/image"
	"substrate.dev/ate/internal/lifecycle"
	"substrate.dev/ate/internal/metrics"
	"substrate.dev/ate/internal/nodeagent"
	"substrate.dev/ate/internal/store"
)

// apiCore is the API server's assembly, the one `ate apiserver` and
// `ate up` share: the node registry, the workflows over it, the Control
// API with its alarm scheduler and actor identity issuer, and the
// registry answering nodes' self-service calls with them. What differs
// between the two is around it: where the record and snapshot stores
// come from, how the registry reaches nodes (Registry.Dial), how the
// workflows recover (lifecycle.Manager.Recover or RecoverStore), and the
// listeners.
type apiCore struct {
	registry  *nodeagent.Registry
	lifecycle *lifecycle.Manager
	api       *apiserver.Server
	alarms    *alarm.Scheduler
	issuer    *identity.Issuer
	// holder names this API server in the store's leases; "" over a
	// store only it uses (bbolt).
	holder string
}

// apiCoreConfig is what newAPICore builds from.
type apiCoreConfig struct {
	Store store.Store
	// Shared says other API server replicas may use Store (its leases
	// then fence workflows).
	Shared    bool
	Snapshots lifecycle.Snapshots
	// Registry configures the node registry; its Store, Shared and
	// Logger are set from the fields above.
	Registry nodeagent.RegistryConfig
	Leases   lifecycle.LeaseConfig
	Ceilings apiserver.Ceilings
	// SandboxClass is the class templates run (the registry's too).
	SandboxClass string
	Images       *image.Cache
	// MaxStreamsPerCaller: apiserver.Server.SetMaxStreamsPerCaller.
	MaxStreamsPerCaller int
	// Alarm configures the alarm scheduler; its Holder is set to the
	// lease holder, or AlarmHolder over a store only we use, and Metrics
	// from Metrics.
	Alarm       alarm.Config
	AlarmHolder string
	Identity    IdentityConfig
	// Metrics, if set, receives the lifecycle's and the alarms' metrics.
	Metrics *metrics.Metrics
	Logger  *slog.Logger
}

// newAPICore builds the API server's parts over c; nothing runs yet (the
// caller recovers the workflows and runs the registry, alarms and
// issuer). Close the registry and the lifecycle manager when done.
func newAPICore(ctx context.Context, c apiCoreConfig) (*apiCore, error) {
	core := &apiCore{}
	rc := c.Registry
	rc.Store, rc.Shared, rc.SandboxClass, rc.Logger = c.Store, c.Shared, c.SandboxClass, c.Logger
	var err error
	if core.registry, err = nodeagent.NewRegistry(ctx, rc); err != nil {
		return nil, err
	}
	// An embedded store has exactly one API server (bbolt's file lock
	// sees to that), so its workflows need no store leases: the
	// in-process lock serialises them, and a restarted process never
	// waits out a dead predecessor's lease. Over a shared store
	// (PostgreSQL) each replica holds leases under a name of its own.
	if c.Shared {
		core.holder = replicaName()
	}
	core.lifecycle = lifecycle.New(c.Store, core.registry, c.Snapshots, core.holder, c.Logger)
	core.lifecycle.SetLeases(c.Leases)
	core.lifecycle.SetEvictionLimits(c.Ceilings.Eviction)
	if c.Metrics != nil {
		core.lifecycle.SetMetrics(c.Metrics.Lifecycle)
	}
	core.registry.SetWorkflows(core.lifecycle)

	core.api = apiserver.New(c.Store, core.lifecycle, c.SandboxClass, c.Images, c.Logger)
	core.api.SetNodes(core.registry)
	core.api.SetMaxStreamsPerCaller(c.MaxStreamsPerCaller)
	core.api.SetCeilings(c.Ceilings)
	ac := c.Alarm
	ac.Holder = orDefault(core.holder, c.AlarmHolder)
	if c.Metrics != nil {
		ac.Metrics = c.Metrics.Alarms
	}
	core.alarms = alarm.New(c.Store, core.lifecycle, ac, c.Logger)
	core.api.SetAlarms(core.alarms)
	core.issuer = c.Identity.newIssuer(c.Store, c.Logger)
	core.registry.SetSelfCallHandler(apiserver.NewSelfService(core.alarms, core.issuer, core.lifecycle, c.Logger).Answer)
	return core, nil
}
