package resolver

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Scheme is the URI scheme of the targets this package resolves:
// k8s:///<service>[.<namespace>]:<port>.
const Scheme = "k8s"

// InClusterNamespaceFile is where a Pod's service account token mount
// names the Pod's namespace, the default namespace of a target that
// names none.
const InClusterNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// ErrTarget is wrapped by every error about a malformed k8s:/// target.
var ErrTarget = errors.New("invalid k8s:/// target")

// Target is a parsed k8s:/// target.
type Target struct {
	// Service is the Service's name.
	Service string
	// Namespace is the Service's namespace; empty if the target names
	// none (DefaultNamespace then applies).
	Namespace string
	// Port is the Service port: its name ("grpc"), or its number as a
	// decimal string ("443") which the Service maps to a name. Either way
	// the port dialled is the EndpointSlices' port of that name, i.e. the
	// Pods' target port.
	Port string
}

// String returns the target in its k8s:/// form.
func (t Target) String() string {
	host := t.Service
	if t.Namespace != "" {
		host += "." + t.Namespace
	}
	return Scheme + ":///" + net.JoinHostPort(host, t.Port)
}

// numericPort reports the port number of a numeric Port.
func (t Target) numericPort() (int32, bool) {
	n, err := strconv.ParseInt(t.Port, 10, 32)
	return int32(n), err == nil
}

// ParseTarget parses "k8s:///<service>[.<namespace>]:<port-name-or-number>"
// (also without the "k8s:///" prefix, the form grpc-go hands a resolver as
// its endpoint). Errors wrap ErrTarget.
func ParseTarget(s string) (Target, error) {
	rest := strings.TrimPrefix(s, Scheme+":///")
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return Target{}, fmt.Errorf("%w %q: %v (want k8s:///service.namespace:port)", ErrTarget, s, err)
	}
	svc, ns, _ := strings.Cut(host, ".")
	if msgs := validation.IsDNS1035Label(svc); len(msgs) > 0 {
		return Target{}, fmt.Errorf("%w %q: service name %q: %s", ErrTarget, s, svc, strings.Join(msgs, "; "))
	}
	if strings.Contains(host, ".") {
		if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			return Target{}, fmt.Errorf("%w %q: namespace %q: %s (want service.namespace, nothing more)", ErrTarget, s, ns, strings.Join(msgs, "; "))
		}
	}
	t := Target{Service: svc, Namespace: ns, Port: port}
	if n, ok := t.numericPort(); ok {
		if n < 1 || n > 65535 {
			return Target{}, fmt.Errorf("%w %q: port %d out of range", ErrTarget, s, n)
		}
	} else if msgs := validation.IsValidPortName(port); len(msgs) > 0 {
		return Target{}, fmt.Errorf("%w %q: port name %q: %s", ErrTarget, s, port, strings.Join(msgs, "; "))
	}
	return t, nil
}

// DefaultNamespace is the namespace of a target that names none: the
// Pod's own (InClusterNamespaceFile) when running in a cluster, else
// "default".
func DefaultNamespace() string {
	if b, err := os.ReadFile(InClusterNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}
