package router

import "substrate.dev/ate/internal/coalesce"

// errCallExpired marks the error of a shared call (a coalesce.Group's) that
// ended with its timeout: a caller that has time left may start another.
var errCallExpired = coalesce.ErrExpired
