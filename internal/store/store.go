// Package store defines Substrate's persistent records and the domain
// operations on them. Every write of an actor is compare-and-set on (uid,
// version); the claim of a worker and the actor's move to RESUMING happen in
// one transaction. Backends: bolt (embedded, the default) and postgres
// (shared, for several API servers); storetest is the conformance suite
// every backend passes.
//
// Fencing: a workflow that holds an actor's lease (AcquireLease) puts it
// on the context of its writes (WithFence). UpdateActor, ClaimWorker,
// DeleteActor and ReleaseWorker then check, in the transaction that
// writes, that the lease is still the writer's and unexpired, and fail
// with ErrFenced without writing otherwise; so a writer that lost its
// lease (paused, partitioned, slow) cannot overwrite its successor's
// work however late its write arrives.
package store

import (
	"context"
	"errors"
	"slices"
	"time"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// Errors returned by every backend; callers match them with errors.Is.
var (
	ErrNotFound      = errors.New("not found")
	ErrAlreadyExists = errors.New("already exists")
	// ErrConflict: a compare-and-set found another uid, version or state.
	ErrConflict = errors.New("conflict: record changed concurrently")
	// ErrNotEmpty: an atespace still holds actors or templates, or a
	// template is still used by actors.
	ErrNotEmpty = errors.New("still in use")
	// ErrNoFreeWorker: no free worker matches the actor's selector now.
	ErrNoFreeWorker = errors.New("no free worker")
	// ErrLeaseHeld: another holder owns an unexpired lease.
	ErrLeaseHeld = errors.New("lease held by another holder")
	// ErrFenced: the write's lease (WithFence) expired or was taken over,
	// or a renewal found it so. The writer must stop, not retry: another
	// holder may own the record now. Distinct from ErrConflict, which a
	// writer resolves by reading again.
	ErrFenced = errors.New("fenced: the lease this write was made under expired or was taken over")
	// ErrUnavailable: the backend cannot reach its database now (refused,
	// reset or timed-out connection, server shutting down). Retryable; the
	// write may or may not have committed if the connection broke during
	// the commit, so retry by reading again, as after ErrConflict.
	ErrUnavailable = errors.New("store unavailable")
)

// HolderKey is the key of holder's heartbeat: a lease holder keeps it
// (AcquireLease, again and again) to say it is alive, and once it
// expires the holder's other leases may be taken over (TakeOverLease).
func HolderKey(holder string) string { return "holder/" + holder }

// Fence is the lease an actor write is made under: Key and Holder as
// given to AcquireLease, Token as it returned.
type Fence struct {
	Key, Holder string
	Token       int64
}

// fenceKey is the context key of a Fence.
type fenceKey struct{}

// WithFence returns ctx carrying f: writes made with it are fenced by
// f's lease (the package comment says which and how).
func WithFence(ctx context.Context, f Fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// FenceFrom returns the Fence ctx carries, if any.
func FenceFrom(ctx context.Context) (Fence, bool) {
	f, ok := ctx.Value(fenceKey{}).(Fence)
	return f, ok
}

// ActorState is the actor's lifecycle state (docs/architecture.md, Lifecycle). The
// strings equal the atev1.ActorState enum names.
type ActorState string

// Actor states.
const (
	Suspended  ActorState = "SUSPENDED"
	Resuming   ActorState = "RESUMING"
	Running    ActorState = "RUNNING"
	Suspending ActorState = "SUSPENDING"
	Pausing    ActorState = "PAUSING"
	Paused     ActorState = "PAUSED"
	Crashed    ActorState = "CRASHED"
	Deleting   ActorState = "DELETING"
)

// ActorStates returns every actor state, in atev1.ActorState's order: a
// new slice each call.
func ActorStates() []ActorState {
	return []ActorState{Suspended, Resuming, Running, Suspending, Pausing, Paused, Crashed, Deleting}
}

// Atespace is a tenant namespace.
type Atespace struct {
	Name       string    `json:"name"`
	UID        string    `json:"uid"`
	CreateTime time.Time `json:"createTime"`
}

// TemplatePhase is the state of a template's golden snapshot. The
// strings equal atev1.ActorTemplateStatus's phase values.
type TemplatePhase string

// Template phases.
const (
	TemplateBuilding TemplatePhase = "BUILDING"
	TemplateReady    TemplatePhase = "READY"
	TemplateFailed   TemplatePhase = "FAILED"
)

// Template is an immutable ActorTemplate plus the status of its golden
// snapshot (the only part that changes, by CAS on Version).
type Template struct {
	Atespace   string                   `json:"atespace"`
	Name       string                   `json:"name"`
	UID        string                   `json:"uid"`
	Spec       *atev1.ActorTemplateSpec `json:"-"`
	CreateTime time.Time                `json:"createTime"`
	Version    int64                    `json:"version"`
	// Phase is the golden snapshot's state.
	Phase          TemplatePhase `json:"phase"`
	Message        string        `json:"message,omitempty"`
	GoldenSnapshot string        `json:"goldenSnapshot,omitempty"`
	// ImageDigest pins the image the golden snapshot was built from.
	ImageDigest string `json:"imageDigest,omitempty"`
	// BuildPhases are the golden build's phases begun so far, oldest
	// first (READY and FAILED keep them). Kept as the enum's
	// numbers, which the API never changes.
	BuildPhases []atev1.BuildPhase `json:"buildPhases,omitempty"`
}

// SetStatus sets t's status fields, those UpdateTemplateStatus writes,
// to from's.
func (t *Template) SetStatus(from *Template) {
	t.Phase, t.Message, t.GoldenSnapshot, t.ImageDigest = from.Phase, from.Message, from.GoldenSnapshot, from.ImageDigest
	t.BuildPhases = slices.Clone(from.BuildPhases)
}

// Actor is one stateful instance.
type Actor struct {
	Atespace string `json:"atespace"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
	Template string `json:"template"`
	// Lifecycle is what the workflows (internal/lifecycle) own. It is
	// embedded, so its fields sit in the record beside the others, as
	// they did before they were grouped.
	Lifecycle
	// WorkerSelector is the client's (UpdateActor), read at each resume.
	WorkerSelector map[string]string `json:"workerSelector,omitempty"`
	// Labels are the client's, set at create; ListActors' label selector
	// matches them. Kept in the record on both backends (no column).
	Labels map[string]string `json:"labels,omitempty"`
	// Version increases by one on every write; CAS compares it.
	Version    int64     `json:"version"`
	CreateTime time.Time `json:"createTime"`
	// StateTime is when a workflow last wrote the actor; every such write
	// sets it, so it is not part of Lifecycle's comparison.
	StateTime time.Time `json:"stateTime"`
	// LastActivity is when the router last saw traffic for the actor.
	LastActivity time.Time `json:"lastActivity,omitzero"`
}

// Lifecycle is the part of an Actor the lifecycle workflows own and no
// one else writes: a workflow whose write loses to another writer merges
// these onto the fresh record when they did not change meanwhile, and
// treats a change of any of them as a real conflict. Comparable.
type Lifecycle struct {
	State ActorState `json:"state"`
	// Worker holds the worker's name while the actor owns it (RESUMING,
	// RUNNING, SUSPENDING). Clearing it in UpdateActor frees the worker.
	Worker string `json:"worker,omitempty"`
	// Snapshot is the id of the latest complete durable snapshot, empty
	// until the first suspend.
	Snapshot string `json:"snapshot,omitempty"`
	// PendingSnapshot is the durable snapshot a SUSPENDING workflow is
	// having written ("<uid>/<id>"): if its workflow dies before the
	// SUSPENDED write (a replica killed, a store outage past its lease),
	// the workflow that finds the actor SUSPENDING adopts it when it was
	// committed, so work the actor answered before it was checkpointed
	// is not rolled back. A PAUSING workflow records the same for the
	// checkpoint it is having written to its node's disk.
	PendingSnapshot string `json:"pendingSnapshot,omitempty"`
	// PausedSnapshot and Node locate a PAUSED actor's checkpoint on a
	// node's disk; it is newer than Snapshot.
	PausedSnapshot string `json:"pausedSnapshot,omitempty"`
	Node           string `json:"node,omitempty"`
	Message        string `json:"message,omitempty"`
	// Resumes counts completed resumes.
	Resumes int64 `json:"resumes"`
	// Assignment is the lease token of the resume that last started the
	// actor on a worker (0 without leases): what routers send the
	// worker's tunnel, which refuses any other (atev1.Actor.assignment).
	// Meaningful while RUNNING.
	Assignment int64 `json:"assignment,omitempty"`
	// Reason is why the actor was last suspended or paused; Message says
	// more. Empty while it has not been.
	Reason CheckpointReason `json:"reason,omitempty"`
	// EvictedFor is the actor an eviction made room for, with
	// ReasonEvicted; stored as "<atespace>/<name>".
	EvictedFor names.ActorKey `json:"evictedFor,omitzero"`
	// VolumesOnly: the actor moved to another template (Template) since
	// Snapshot was taken, so Snapshot's memory is the old template's: the
	// next resume takes only its volumes, onto the template's golden
	// snapshot or a cold boot, and clears this.
	VolumesOnly bool `json:"volumesOnly,omitempty"`
}

// CheckpointReason is why an actor was suspended or paused. The strings
// equal the atev1.CheckpointReason enum names.
type CheckpointReason string

// Checkpoint reasons.
const (
	// ReasonRequested: a client asked (ate suspend, ate pause, shutdown).
	ReasonRequested CheckpointReason = "REQUESTED"
	// ReasonIdle: the router saw no traffic for the template's idle.after.
	ReasonIdle CheckpointReason = "IDLE"
	// ReasonEvicted: its worker was needed for an actor waiting for one.
	ReasonEvicted CheckpointReason = "EVICTED"
	// ReasonSelfRequested: the actor asked from inside its sandbox.
	ReasonSelfRequested CheckpointReason = "SELF_REQUESTED"
)

// Key returns the actor's identity.
func (a *Actor) Key() names.ActorKey { return names.ActorKey{Atespace: a.Atespace, Name: a.Name} }

// Worker is one sandbox slot, registered by its node agent.
type Worker struct {
	Name         string            `json:"name"`
	Node         string            `json:"node"`
	TunnelAddr   string            `json:"tunnelAddr"`
	SandboxClass string            `json:"sandboxClass"`
	Labels       map[string]string `json:"labels,omitempty"`
	// ActorUID and Actor name the actor holding the worker; zero when
	// free. Actor is stored as "<atespace>/<name>".
	ActorUID string         `json:"actorUid,omitempty"`
	Actor    names.ActorKey `json:"actor,omitzero"`
}

// Free reports whether no actor holds the worker.
func (w *Worker) Free() bool { return w.ActorUID == "" }

// Lease is a per-key exclusive lease with a fencing token that grows with
// every acquisition, so a stale holder's writes can be recognised.
// Expiry is computed, and compared, by the backend's clock: the local
// clock for bolt, the database server's for postgres (so API server
// replicas' clock skew does not matter).
type Lease struct {
	Key    string    `json:"key"`
	Holder string    `json:"holder"`
	Token  int64     `json:"token"`
	Expiry time.Time `json:"expiry"`
	// TakenFrom, in what AcquireLease and TakeOverLease return, names the
	// holder the lease was taken from: one that had not released it
	// (it died, stood still or was cut off, and its lease expired or its
	// heartbeat lapsed). Empty when the lease was free or the caller's.
	// Not stored.
	TakenFrom string `json:"-"`
}

// Store is the persistence contract. Implementations are safe for
// concurrent use. Returned records are copies the caller owns.
type Store interface {
	CreateAtespace(ctx context.Context, a *Atespace) error
	GetAtespace(ctx context.Context, name string) (*Atespace, error)
	ListAtespaces(ctx context.Context) ([]*Atespace, error)
	// DeleteAtespace returns ErrNotEmpty while actors or templates remain.
	DeleteAtespace(ctx context.Context, name string) error

	// CreateTemplate returns ErrNotFound when the atespace does not exist.
	CreateTemplate(ctx context.Context, t *Template) error
	GetTemplate(ctx context.Context, atespace, name string) (*Template, error)
	ListTemplates(ctx context.Context, atespace string) ([]*Template, error)
	// UpdateTemplateStatus writes t's status fields if the stored UID and
	// Version equal t's; it returns the stored record with Version+1.
	UpdateTemplateStatus(ctx context.Context, t *Template) (*Template, error)
	// DeleteTemplate returns ErrNotEmpty while actors use the template.
	DeleteTemplate(ctx context.Context, atespace, name string) error

	// CreateActor returns ErrNotFound when the atespace or template does
	// not exist.
	CreateActor(ctx context.Context, a *Actor) error
	GetActor(ctx context.Context, key names.ActorKey) (*Actor, error)
	// ListActors returns at most pageSize actors of atespace (all
	// atespaces when empty) in name order after pageToken, and the token
	// of the next page ("" at the end).
	ListActors(ctx context.Context, atespace string, pageSize int, pageToken string) ([]*Actor, string, error)
	// UpdateActor, ClaimWorker, DeleteActor and ReleaseWorker are fenced
	// when ctx carries a Fence (WithFence): ErrFenced, nothing written,
	// unless the lease Fence.Key is held by Fence.Holder with Fence.Token
	// and unexpired, checked in the writing transaction.

	// UpdateActor writes a if the stored record has a's UID and Version
	// (else ErrConflict) and returns it with Version+1. A changed
	// a.Template must name a template of the atespace (else ErrNotFound). If a.Worker no
	// longer names the worker the stored record held, that worker is freed
	// in the same transaction. a.Worker may keep or clear the stored
	// worker, never name another, and a kept worker must still be held by
	// the actor (else ErrConflict): an actor never points at a worker it
	// does not hold.
	UpdateActor(ctx context.Context, a *Actor) (*Actor, error)
	// ClaimWorker atomically picks a free worker whose labels match a's
	// WorkerSelector (and, if node is set, on that node), assigns it to a,
	// and writes a as RESUMING on it, CAS on a's UID and Version. The
	// workers named in prefer are tried first, in order (a node lists
	// those holding a sandbox prepared for a's template); names that are
	// unknown, taken, elsewhere or not matching are skipped.
	// ErrNoFreeWorker when none is free.
	ClaimWorker(ctx context.Context, a *Actor, node string, prefer ...string) (*Actor, *Worker, error)
	// RecordActivity moves each named actor's LastActivity forward (never
	// back), in one transaction, bumping the Version of those it changes;
	// unknown actors are skipped.
	RecordActivity(ctx context.Context, acts []names.Activity) error
	// DeleteActor deletes the actor if UID and Version match, freeing any
	// worker it holds and deleting its alarms.
	DeleteActor(ctx context.Context, a *Actor) error

	// PutWorker registers or updates a worker's description; it keeps the
	// stored assignment unless w is being registered for the first time.
	PutWorker(ctx context.Context, w *Worker) error
	GetWorker(ctx context.Context, name string) (*Worker, error)
	ListWorkers(ctx context.Context) ([]*Worker, error)
	// ReleaseWorker frees the worker if actorUID holds it; a no-op
	// otherwise.
	ReleaseWorker(ctx context.Context, name, actorUID string) error
	// DeleteWorker unregisters a free worker (its node lost it);
	// ErrConflict when an actor holds it: the holder is crashed first
	// (lifecycle.WorkersLost), or a claim made since the caller last
	// read the worker would be left pointing at no worker. Deleting an
	// unknown worker succeeds.
	DeleteWorker(ctx context.Context, name string) error

	// AcquireLease takes key's lease for holder for ttl if it is free,
	// expired or already holder's, returning it with a new token.
	AcquireLease(ctx context.Context, key, holder string, ttl time.Duration) (*Lease, error)
	// TakeOverLease is AcquireLease that also takes key's lease from a
	// holder that has fallen silent: one whose own lease, HolderKey, it
	// kept renewed as a heartbeat and has let expire, even while key's
	// lease has time left. The caller must fence everything the old
	// holder may still do (its writes by this lease's token, its node
	// calls by the same token: docs/ha.md). A holder with no HolderKey
	// lease is never silent: only its lease's expiry frees key.
	TakeOverLease(ctx context.Context, key, holder string, ttl time.Duration) (*Lease, error)
	// RenewLease extends key's lease to now+ttl, keeping its token, if
	// holder still holds it with token and it has not expired; else
	// ErrFenced (the holder lost it and must stop). It returns the lease
	// with its new Expiry. A renewal whose ctx ended first may still
	// commit later (bolt leaves it queued): harmless, since it only ever
	// extends a lease its holder and token still hold.
	RenewLease(ctx context.Context, key, holder string, token int64, ttl time.Duration) (*Lease, error)
	// ReleaseLease ends holder's lease; a no-op when holder lost it.
	ReleaseLease(ctx context.Context, key, holder string) error

	// Alarms: DeleteActor deletes the actor's alarms in its transaction.
	Alarms
	// Tags: named snapshots of actors.
	Tags
	// Events: kept after the actor's deletion until pruned.
	Events
	// SigningKeys: the actor-identity signing keys (internal/identity).
	SigningKeys
	// IngressTokens: the router's bearer tokens per atespace.
	IngressTokens
	// RoleBindings: who may do what, per atespace (internal/auth).
	RoleBindings
	// NodeDrains: the nodes drained, which no replica places actors on.
	NodeDrains

	Close() error
}

// MatchLabels reports whether labels contain every selector pair.
func MatchLabels(selector, labels map[string]string) bool {
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// AlarmState is where an alarm is in its life. Delivered alarms are
// deleted, so a stored alarm is pending or failed.
type AlarmState string

// Alarm states.
const (
	// AlarmPending: not yet delivered; it fires at At (or, after a failed
	// attempt, at NextAttempt).
	AlarmPending AlarmState = "PENDING"
	// AlarmFailed: delivery was retried for its whole budget and gave up;
	// Message says why. Kept until cancelled or its actor is deleted.
	AlarmFailed AlarmState = "FAILED"
)

// Alarm is a scheduled wake-up of an actor: at At the actor is resumed
// and sent POST Path with header Ate-Alarm-Id: ID (internal/alarm).
type Alarm struct {
	// ID is unique across the store (a random, URL-safe string).
	ID       string `json:"id"`
	Atespace string `json:"atespace"`
	// Actor is the actor's name within Atespace; ActorUID the incarnation
	// it was set for, so an actor deleted and re-created under its name
	// does not receive its predecessor's alarms.
	Actor    string `json:"actor"`
	ActorUID string `json:"actorUid"`
	// Path is the request path the alarm is delivered to, "/…".
	Path string `json:"path"`
	// At is when the alarm is due.
	At time.Time `json:"at"`
	// NextAttempt is when the next delivery is due: At until an attempt
	// failed, then later (backoff). Schedulers order by it.
	NextAttempt time.Time  `json:"nextAttempt"`
	State       AlarmState `json:"state"`
	// Attempts counts delivery attempts made so far.
	Attempts int `json:"attempts,omitempty"`
	// Message is the last attempt's failure, if any.
	Message    string    `json:"message,omitempty"`
	CreateTime time.Time `json:"createTime"`
	// Version increases by one on every write; UpdateAlarm compares it.
	Version int64 `json:"version"`
}

// Key returns the alarm's actor.
func (a *Alarm) Key() names.ActorKey { return names.ActorKey{Atespace: a.Atespace, Name: a.Actor} }

// ErrTooMany: a create would exceed a per-record limit (CreateAlarm's
// maxPending).
var ErrTooMany = errors.New("too many")

// Alarms is the alarm part of the Store contract.
type Alarms interface {
	// CreateAlarm stores a as PENDING if its actor exists with
	// a.ActorUID (else ErrNotFound), its ID is new (else
	// ErrAlreadyExists) and the actor has fewer than maxPending pending
	// alarms (else ErrTooMany), all checked in the writing transaction.
	CreateAlarm(ctx context.Context, a *Alarm, maxPending int) error
	// GetAlarm returns the alarm with id, or ErrNotFound.
	GetAlarm(ctx context.Context, id string) (*Alarm, error)
	// ListAlarms returns the alarms of atespace (every atespace when
	// empty) and, when actor is not empty, of that actor only, ordered by
	// NextAttempt then ID.
	ListAlarms(ctx context.Context, atespace, actor string) ([]*Alarm, error)
	// UpdateAlarm writes a if the stored alarm has a's Version (else
	// ErrConflict; ErrNotFound when gone) and returns it with Version+1.
	UpdateAlarm(ctx context.Context, a *Alarm) (*Alarm, error)
	// DeleteAlarm deletes the alarm with id; ErrNotFound when none.
	DeleteAlarm(ctx context.Context, id string) error
}

// Tag is a named, retained snapshot of an actor (docs/actors.md, Tags
// and fork): its own copy of the actor's state at tagging time, from
// which new actors start (CreateActor --from-tag). Immutable once
// created.
type Tag struct {
	Atespace string `json:"atespace"`
	Name     string `json:"name"`
	// UID owns Snapshot in the snapshot store (its owner segment).
	UID string `json:"uid"`
	// Actor and ActorUID are the tagged actor's name and incarnation, for
	// display: the tag outlives the actor.
	Actor    string `json:"actor"`
	ActorUID string `json:"actorUid"`
	// Template is what forks of the tag run; the template cannot be
	// deleted while tags name it.
	Template string `json:"template"`
	// Snapshot is the tag's durable snapshot, "<UID>/<id>".
	Snapshot string `json:"snapshot"`
	// VolumesOnly carries the tagged actor's mark (Lifecycle.VolumesOnly)
	// to forks: only Snapshot's volumes are the template's to restore.
	VolumesOnly bool      `json:"volumesOnly,omitempty"`
	CreateTime  time.Time `json:"createTime"`
}

// Tags is the tag part of the Store contract. DeleteAtespace returns
// ErrNotEmpty while the atespace holds tags, DeleteTemplate while tags
// name the template.
type Tags interface {
	// CreateTag stores t if its atespace and template exist (else
	// ErrNotFound) and no tag of the atespace has its name (else
	// ErrAlreadyExists).
	CreateTag(ctx context.Context, t *Tag) error
	// GetTag returns the tag, or ErrNotFound.
	GetTag(ctx context.Context, atespace, name string) (*Tag, error)
	// ListTags returns the tags of atespace (every atespace when empty)
	// ordered by atespace, then name.
	ListTags(ctx context.Context, atespace string) ([]*Tag, error)
	// DeleteTag deletes the tag if its UID is uid (else ErrConflict;
	// ErrNotFound when gone), so a tag deleted and re-created meanwhile
	// is not deleted by mistake.
	DeleteTag(ctx context.Context, atespace, name, uid string) error
}

// SigningKey is one of the keys the API servers sign actor identity
// tokens with (internal/identity): every replica reads the same set from
// the record store, so any of them signs and publishes (JWKS) the same
// keys. Immutable once created.
type SigningKey struct {
	// ID is the key's JWK "kid", unique across the store.
	ID string `json:"id"`
	// Generation numbers keys in creation order from 1; no two keys
	// share one (CreateSigningKey), so replicas racing to add the next
	// key create exactly one.
	Generation int64 `json:"generation"`
	// Algorithm is the JWS algorithm, "ES256".
	Algorithm string `json:"algorithm"`
	// PrivateKey is the key in PKCS #8 DER. The record store holds it in
	// the clear: whoever reads the store can mint identities
	// (docs/security.md, Actor identity).
	PrivateKey []byte `json:"privateKey"`
	// NotBefore is when the key starts signing: the key with the latest
	// NotBefore not after now signs, so a key is published (JWKS) from
	// its creation, ahead of signing.
	NotBefore  time.Time `json:"notBefore"`
	CreateTime time.Time `json:"createTime"`
}

// SigningKeys is the signing-key part of the Store contract.
type SigningKeys interface {
	// CreateSigningKey stores k if no key has its ID or its Generation
	// (else ErrAlreadyExists, nothing written).
	CreateSigningKey(ctx context.Context, k *SigningKey) error
	// ListSigningKeys returns every key, ordered by Generation.
	ListSigningKeys(ctx context.Context) ([]*SigningKey, error)
	// DeleteSigningKey deletes the key with id; ErrNotFound when none.
	DeleteSigningKey(ctx context.Context, id string) error
}

// IngressToken is a bearer token the router accepts for the actors of
// one atespace whose template's ingress policy is "token"
// (docs/security.md, Router ingress policy). The secret itself is never
// stored: Hash is its hex SHA-256 (auth.HashToken). Immutable.
type IngressToken struct {
	Atespace string `json:"atespace"`
	Name     string `json:"name"`
	UID      string `json:"uid"`
	// Hash is the hex SHA-256 of the token.
	Hash       string    `json:"hash"`
	CreateTime time.Time `json:"createTime"`
}

// IngressTokens is the ingress-token part of the Store contract.
// DeleteAtespace deletes the atespace's tokens with it, so an atespace
// re-created under the name does not inherit them.
type IngressTokens interface {
	// CreateIngressToken stores t if its atespace exists (else
	// ErrNotFound) and no token of the atespace has its name (else
	// ErrAlreadyExists).
	CreateIngressToken(ctx context.Context, t *IngressToken) error
	// ListIngressTokens returns the tokens of atespace (every atespace
	// when empty) ordered by atespace, then name.
	ListIngressTokens(ctx context.Context, atespace string) ([]*IngressToken, error)
	// FindIngressToken returns the token of atespace whose Hash is hash,
	// or ErrNotFound.
	FindIngressToken(ctx context.Context, atespace, hash string) (*IngressToken, error)
	// DeleteIngressToken deletes the token; ErrNotFound when there is none.
	DeleteIngressToken(ctx context.Context, atespace, name string) error
}
