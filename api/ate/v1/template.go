package atev1

// BuildPhaseSeparator joins the human text of a golden build's phases
// (BuildPhase.Text) in a BUILDING template's ActorTemplateStatus.message,
// oldest first, as the API server appends each as it begins: for clients
// older than ActorTemplateStatus.build_phases, which list the same phases
// as the enum (`ate create template --wait` reads those).
const BuildPhaseSeparator = "; "

// The values of Probe.after_restore: whether a template's wakeup probe
// also runs after a restore, or after a boot only.
const (
	// ProbeAfterRestoreProbe (or empty) probes after every boot and
	// restore: an app may answer "not ready" while it warms up again.
	ProbeAfterRestoreProbe = "probe"
	// ProbeAfterRestoreSkip probes after a boot only: a restored actor
	// is let in once its restore and onRestore hook returned, and its
	// first answer goes to the request that woke it.
	ProbeAfterRestoreSkip = "skip"
)

// SkipsRestore reports whether p is not run after a restore. A nil
// probe (the default TCP check) runs after every start.
func (p *Probe) SkipsRestore() bool {
	return p.GetAfterRestore() == ProbeAfterRestoreSkip
}
