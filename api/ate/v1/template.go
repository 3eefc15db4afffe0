package atev1

// BuildPhaseSeparator joins the human text of a golden build's phases
// (BuildPhase.Text) in a BUILDING template's ActorTemplateStatus.message,
// oldest first, as the API server appends each as it begins: for clients
// older than ActorTemplateStatus.build_phases, which list the same phases
// as the enum (`ate create template --wait` reads those).
const BuildPhaseSeparator = "; "
