package atev1

// HeaderEvicted is ResumeActor's response header metadata naming
// ("<atespace>/<name>") the actor checkpointed to free the worker the
// resume got; absent when a free worker was at hand (control.proto).
const HeaderEvicted = "ate-evicted"
