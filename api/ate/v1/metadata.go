package atev1

// HeaderEvicted is ResumeActor's response header metadata naming
// ("<atespace>/<name>") the actor checkpointed to free the worker the
// resume got; absent when a free worker was at hand (control.proto), and
// when the caller may not read the evicted actor's atespace (no tenant
// learns another's actors' names).
const HeaderEvicted = "ate-evicted"
