package controller

import (
	"errors"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

func TestResolveSandboxConfig(t *testing.T) {
	cfg := func(name, class string, def bool) atek8s.SandboxConfig {
		return atek8s.SandboxConfig{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: atek8s.SandboxConfigSpec{SandboxClass: class, Default: def}}
	}
	pool := func(class, name string) *atek8s.WorkerPool {
		return &atek8s.WorkerPool{Spec: atek8s.WorkerPoolSpec{SandboxClass: class, SandboxConfigName: name}}
	}
	tests := []struct {
		name     string
		pool     *atek8s.WorkerPool
		configs  []atek8s.SandboxConfig
		want     string // resolved name, "" none
		conflict bool
		notFound bool
	}{
		{name: "no configs", pool: pool("gvisor", "")},
		{name: "the class's default", pool: pool("gvisor", ""), configs: []atek8s.SandboxConfig{cfg("a", "gvisor", false), cfg("b", "gvisor", true)}, want: "b"},
		{name: "empty class is gvisor", pool: pool("", ""), configs: []atek8s.SandboxConfig{cfg("b", "", true)}, want: "b"},
		{name: "another class's default", pool: pool("gvisor", ""), configs: []atek8s.SandboxConfig{cfg("b", "other", true)}},
		{name: "named wins over default", pool: pool("gvisor", "a"), configs: []atek8s.SandboxConfig{cfg("a", "gvisor", false), cfg("b", "gvisor", true)}, want: "a"},
		{name: "named missing", pool: pool("gvisor", "x"), configs: []atek8s.SandboxConfig{cfg("b", "gvisor", true)}, notFound: true},
		{name: "two defaults", pool: pool("gvisor", ""), configs: []atek8s.SandboxConfig{cfg("b", "gvisor", true), cfg("a", "gvisor", true)}, conflict: true},
		{name: "two defaults, named one", pool: pool("gvisor", "a"), configs: []atek8s.SandboxConfig{cfg("b", "gvisor", true), cfg("a", "gvisor", true)}, want: "a"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc, err := resolveSandboxConfig(tc.pool, tc.configs)
			var conflict *conflictError
			switch {
			case tc.conflict:
				if !errors.As(err, &conflict) || conflict.names[0] != "a" || conflict.names[1] != "b" {
					t.Fatalf("got %v, want a conflict of a and b", err)
				}
			case tc.notFound:
				if !errors.Is(err, errSandboxConfigNotFound) {
					t.Fatalf("got %v, want not found", err)
				}
			case err != nil:
				t.Fatal(err)
			case tc.want == "" && sc != nil:
				t.Fatalf("resolved %s, want none", sc.Name)
			case tc.want != "" && (sc == nil || sc.Name != tc.want):
				t.Fatalf("resolved %v, want %s", sc, tc.want)
			}
		})
	}
}
