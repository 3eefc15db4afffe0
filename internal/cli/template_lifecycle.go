package cli

import atev1 "substrate.dev/ate/api/ate/v1"

// lifecycleFields are the template fields about snapshots and volumes:
//
//	volumes: [{name: data}]
//	containers: [{..., volumeMounts: [{name: data, mountPath: /data}]}]
//	snapshotPolicy: {onPause: Full, onSuspend: Data}
//	drainGraceSeconds: 10
//
// The server validates them; the client only carries them.
type lifecycleFields struct {
	Volumes           []volumeFile        `json:"volumes,omitempty"`
	SnapshotPolicy    *snapshotPolicyFile `json:"snapshotPolicy,omitempty"`
	DrainGraceSeconds int32               `json:"drainGraceSeconds,omitempty"`
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
}

func (c containerFile) volumeMounts() []*atev1.VolumeMount {
	var out []*atev1.VolumeMount
	for _, m := range c.VolumeMounts {
		out = append(out, &atev1.VolumeMount{Name: m.Name, MountPath: m.MountPath})
	}
	return out
}
