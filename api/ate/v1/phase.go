package atev1

// Phases are enums on the wire: ActorTemplateStatus.phase, Worker.phase,
// Node.phase, and a golden build's BuildPhase. Each replaced a string
// that stays, deprecated, for peers older than the enum (a rolling
// upgrade, a third-party client): senders fill both, and readers take
// the enum, falling back to the string only when the enum is
// unspecified, which is what a peer older than the enum sends. This
// file is the only code that touches the deprecated strings (staticcheck
// flags them elsewhere): the Fill methods write both fields, the
// OrName and OrText methods read them.

// FillPhase sets the template's phase to p and, for clients older than
// the enum, phase_name to p's name.
func (x *ActorTemplateStatus) FillPhase(p ActorTemplateStatus_Phase) {
	x.Phase, x.PhaseName = p, p.String()
}

// FillPhase sets the worker's phase to p and, for clients older than the
// enum, phase_name to p's name.
func (x *Worker) FillPhase(p Worker_Phase) {
	x.Phase, x.PhaseName = p, p.String()
}

// FillPhase sets the node's phase to p and, for clients older than the
// enum, phase_name to p's name.
func (x *Node) FillPhase(p Node_Phase) {
	x.Phase, x.PhaseName = p, p.String()
}

// PhaseOrName is the template's phase: phase, or, from a server older
// than the enum, the value phase_name names; PHASE_UNSPECIFIED when it
// names none. Nil-safe, as the getters are.
func (x *ActorTemplateStatus) PhaseOrName() ActorTemplateStatus_Phase {
	return phaseOr(x.GetPhase(), x.GetPhaseName(), ActorTemplateStatus_Phase_value)
}

// PhaseOrName is the worker's phase: phase, or, from a server older than
// the enum, the value phase_name names; PHASE_UNSPECIFIED when it names
// none. Nil-safe.
func (x *Worker) PhaseOrName() Worker_Phase {
	return phaseOr(x.GetPhase(), x.GetPhaseName(), Worker_Phase_value)
}

// PhaseOrName is the node's phase: phase, or, from a server older than
// the enum, the value phase_name names; PHASE_UNSPECIFIED when it names
// none. Nil-safe.
func (x *Node) PhaseOrName() Node_Phase {
	return phaseOr(x.GetPhase(), x.GetPhaseName(), Node_Phase_value)
}

// phaseOr is p, or, when p is unspecified (zero), the value of values
// that name names (zero for none).
func phaseOr[P ~int32](p P, name string, values map[string]int32) P {
	if p != 0 {
		return p
	}
	return P(values[name])
}

// buildPhaseTexts are the build phases' human text, as the phases'
// comments in control.proto give it: what `ate create template --wait`
// prints, what a BUILDING template's status message joins, and what the
// deprecated NodeEvent.phase carries.
var buildPhaseTexts = map[BuildPhase]string{
	BuildPhase_IMAGE:      "pulling and unpacking the image",
	BuildPhase_BOOT:       "booting the sandbox",
	BuildPhase_PROBE:      "waiting for the wakeup probe",
	BuildPhase_CHECKPOINT: "checkpointing the golden snapshot",
}

// Text is p's human text ("pulling and unpacking the image", …); for a
// value it does not know, its name.
func (p BuildPhase) Text() string {
	if t, ok := buildPhaseTexts[p]; ok {
		return t
	}
	return p.String()
}

// BuildPhaseOfText is the phase whose human text is text;
// BUILD_PHASE_UNSPECIFIED for none.
func BuildPhaseOfText(text string) BuildPhase {
	for p, t := range buildPhaseTexts {
		if t == text {
			return p
		}
	}
	return BuildPhase_BUILD_PHASE_UNSPECIFIED
}

// FillBuildPhase sets the event's build_phase to p and, for API servers
// older than it, phase to p's human text.
func (x *NodeEvent) FillBuildPhase(p BuildPhase) {
	x.BuildPhase, x.Phase = p, p.Text()
}

// BuildPhaseOrText is the build phase a BUILD_PROGRESS event reports:
// build_phase, or, from a node older than it, the phase whose human text
// the deprecated phase is; BUILD_PHASE_UNSPECIFIED when it is none.
// Nil-safe.
func (x *NodeEvent) BuildPhaseOrText() BuildPhase {
	if p := x.GetBuildPhase(); p != BuildPhase_BUILD_PHASE_UNSPECIFIED {
		return p
	}
	return BuildPhaseOfText(x.GetPhase())
}
