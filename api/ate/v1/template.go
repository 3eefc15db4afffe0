package atev1

// BuildPhaseSeparator joins the phases of a golden build (the node's
// phases, nodeapi.PhaseImage …) in a BUILDING template's
// ActorTemplateStatus.message, oldest first: the API server appends each
// as it begins, and `ate create template --wait` splits the message to
// print the ones it has not printed yet.
const BuildPhaseSeparator = "; "
