package cli

import atev1 "substrate.dev/ate/api/ate/v1"

// lifecycleFields are the template fields about snapshots, volumes and
// restores:
//
//	volumes: [{name: data}]
//	containers: [{..., volumeMounts: [{name: data, mountPath: /data}]}]
//	snapshotPolicy: {onPause: Full, onSuspend: Data}
//	drainGraceSeconds: 10
//	onRestore: {httpPost: {path: /ate/restored, port: 8080}, timeoutSeconds: 5}
//	newActors: golden                  # or coldBoot; unset: golden with onRestore, else coldBoot
//	ttl: {deleteAfterIdle: 14d}        # a Go duration or whole days; absent: never
//
// The server validates them; the client only carries them.
type lifecycleFields struct {
	Volumes           []volumeFile        `json:"volumes,omitempty"`
	SnapshotPolicy    *snapshotPolicyFile `json:"snapshotPolicy,omitempty"`
	DrainGraceSeconds int32               `json:"drainGraceSeconds,omitempty"`
	// OnRestore is called after every restore, before traffic, so the
	// actor can reseed what the snapshot copied (docs/restore.md).
	OnRestore *restoreHookFile `json:"onRestore,omitempty"`
	// NewActors is how an actor without a snapshot of its own starts:
	// golden (restore the golden snapshot) or coldBoot; unset, golden
	// when OnRestore is set and coldBoot otherwise.
	NewActors string `json:"newActors,omitempty"`
	// TTL deletes actors left SUSPENDED or CRASHED and unused for
	// deleteAfterIdle (docs/actors.md, Expiry).
	TTL *ttlFile `json:"ttl,omitempty"`
}

type ttlFile struct {
	DeleteAfterIdle string `json:"deleteAfterIdle,omitempty"`
}

type restoreHookFile struct {
	HTTPPost       *httpPostFile `json:"httpPost,omitempty"`
	TimeoutSeconds int32         `json:"timeoutSeconds,omitempty"`
}

type httpPostFile struct {
	Path string `json:"path"`
	Port int32  `json:"port"`
}

type volumeFile struct {
	Name string `json:"name"`
}

type volumeMountFile struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

type snapshotPolicyFile struct {
	OnPause   string `json:"onPause,omitempty"`
	OnSuspend string `json:"onSuspend,omitempty"`
}

func (l lifecycleFields) apply(spec *atev1.ActorTemplateSpec) {
	for _, v := range l.Volumes {
		spec.Volumes = append(spec.Volumes, &atev1.Volume{Name: v.Name})
	}
	if p := l.SnapshotPolicy; p != nil {
		spec.SnapshotPolicy = &atev1.SnapshotPolicy{OnPause: p.OnPause, OnSuspend: p.OnSuspend}
	}
	spec.DrainGraceSeconds = l.DrainGraceSeconds
	if h := l.OnRestore; h != nil {
		spec.OnRestore = &atev1.RestoreHook{TimeoutSeconds: h.TimeoutSeconds}
		if p := h.HTTPPost; p != nil {
			spec.OnRestore.HttpPost = &atev1.HTTPPostAction{Path: p.Path, Port: p.Port}
		}
	}
	spec.NewActors = l.NewActors
	if t := l.TTL; t != nil {
		spec.Ttl = &atev1.TTLPolicy{DeleteAfterIdle: t.DeleteAfterIdle}
	}
}

func (c containerFile) volumeMounts() []*atev1.VolumeMount {
	var out []*atev1.VolumeMount
	for _, m := range c.VolumeMounts {
		out = append(out, &atev1.VolumeMount{Name: m.Name, MountPath: m.MountPath})
	}
	return out
}
