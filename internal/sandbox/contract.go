package sandbox

import "substrate.dev/ate/internal/nodeapi"

// The node contract's words the sandbox classes use, under the names
// the node's own code uses; they are defined, with their meaning, in
// internal/nodeapi, which the control plane imports instead of this
// package.
type (
	Process    = nodeapi.Process
	WindowSize = nodeapi.WindowSize
	Class      = nodeapi.Class
)

// The sandbox classes (nodeapi.Class).
const (
	ClassGvisor  = nodeapi.ClassGvisor
	ClassFake    = nodeapi.ClassFake
	DefaultClass = nodeapi.DefaultClass
)

// ErrExecStart is nodeapi.ErrExecStart.
var ErrExecStart = nodeapi.ErrExecStart

// ParseClass is nodeapi.ParseClass: the class a node is to run.
func ParseClass(s string) (Class, error) { return nodeapi.ParseClass(s) }
