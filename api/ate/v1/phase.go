package atev1

// Phases are enums on the wire: ActorTemplateStatus.phase, Worker.phase
// and Node.phase. Each replaced a string
// that stays, deprecated, for peers older than the enum (a rolling
// upgrade, a third-party client): senders fill both, and readers take
// the enum, falling back to the string only when the enum is
// unspecified, which is what a peer older than the enum sends. This
// file is the only code that touches the deprecated strings (staticcheck
// flags them elsewhere): the Fill methods write both fields, the
// OrName methods read them.

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
