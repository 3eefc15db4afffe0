package nodeapi

import "fmt"

// Class names a sandbox implementation (an internal/sandbox Runtime),
// as a template's sandboxClass, a WorkerPool's and a SandboxConfig's, a
// worker's and `--sandbox-class` spell it; on the wire it is its
// String. The classes this binary runs are ClassGvisor and ClassFake,
// but a Kubernetes object may name another (the field is any DNS label,
// and the controller only matches them), so Class is a string:
// ParseClass is for a node about to run one, ClassOf for everyone else.
type Class string

const (
	// ClassGvisor runs each actor in a gVisor sandbox (runsc;
	// internal/sandbox/gvisor).
	ClassGvisor Class = "gvisor"
	// ClassFake is the in-process runtime of control-plane tests and
	// benchmarks (internal/sandbox/fake).
	ClassFake Class = "fake"
	// DefaultClass is what an empty sandboxClass means.
	DefaultClass = ClassGvisor
)

// String returns the class's name on the wire.
func (c Class) String() string { return string(c) }

// ClassOf returns the class a wire field names: DefaultClass when it is
// empty, else the name as it is, whether this binary runs it or not.
func ClassOf(s string) Class {
	if s == "" {
		return DefaultClass
	}
	return Class(s)
}

// ParseClass parses the class a node is to run: ClassOf(s), the empty
// string being DefaultClass, when this binary implements it, else an
// error naming those it does.
func ParseClass(s string) (Class, error) {
	switch c := ClassOf(s); c {
	case ClassGvisor, ClassFake:
		return c, nil
	}
	return "", fmt.Errorf("unknown sandbox class %q: use %s or %s", s, ClassGvisor, ClassFake)
}
