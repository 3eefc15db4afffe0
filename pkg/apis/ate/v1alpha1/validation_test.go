package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"substrate.dev/ate/internal/k8s/k8stest"
	atek8s "substrate.dev/ate/pkg/apis/ate/v1alpha1"
)

// env is the package's one control plane (TestMain).
var env *k8stest.Env

func TestMain(m *testing.M) { k8stest.Main(m, func(e *k8stest.Env) { env = e }) }

// TestWorkerPoolValidation: the CRD's schema and CEL rules refuse
// invalid pools at admission with the types' messages, and accept a
// valid one.
func TestWorkerPoolValidation(t *testing.T) {
	ctx := t.Context()
	valid := func(name string) *atek8s.WorkerPool {
		return &atek8s.WorkerPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec: atek8s.WorkerPoolSpec{Replicas: ptr.To[int32](1), WorkersPerPod: 2,
				Labels: map[string]atek8s.LabelValue{"example.com/tier": "a", "zone": "b-1"}},
		}
	}
	tests := []struct {
		name   string
		mutate func(*atek8s.WorkerPool)
		want   string // "" accepted
	}{
		{name: "valid", mutate: func(*atek8s.WorkerPool) {}},
		{name: "name with a dot", mutate: func(p *atek8s.WorkerPool) { p.Name = "pool.a" },
			want: "a WorkerPool's name must be a DNS label of at most 40 characters"},
		{name: "name too long", mutate: func(p *atek8s.WorkerPool) { p.Name = strings.Repeat("a", 41) },
			want: "a WorkerPool's name must be a DNS label of at most 40 characters"},
		{name: "label key with spaces", mutate: func(p *atek8s.WorkerPool) { p.Spec.Labels["bad key"] = "x" },
			want: "label keys must be Kubernetes label keys"},
		{name: "label value too long", mutate: func(p *atek8s.WorkerPool) { p.Spec.Labels["k"] = atek8s.LabelValue(strings.Repeat("a", 64)) },
			want: "Too long"},
		{name: "label value with a slash", mutate: func(p *atek8s.WorkerPool) { p.Spec.Labels["k"] = "a/b" },
			want: "label values must be at most 63 alphanumerics"},
		{name: "pool label", mutate: func(p *atek8s.WorkerPool) { p.Spec.Labels[atek8s.PoolLabel] = "x" },
			want: "label ate.substrate.dev/pool is set by the controller"},
		{name: "namespace label", mutate: func(p *atek8s.WorkerPool) { p.Spec.Labels[atek8s.NamespaceLabel] = "x" },
			want: "label ate.substrate.dev/namespace is set by the controller"},
		{name: "workersPerPod 0", mutate: func(p *atek8s.WorkerPool) { p.Spec.WorkersPerPod = -1 },
			want: "spec.workersPerPod"},
		{name: "grace below 10", mutate: func(p *atek8s.WorkerPool) { p.Spec.Template.TerminationGracePeriodSeconds = ptr.To[int64](5) },
			want: "terminationGracePeriodSeconds"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := valid(strings.ReplaceAll(tc.name, " ", "-"))
			tc.mutate(p)
			err := env.Client.Create(ctx, p)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}

	// workersPerPod 0 is refused too: the default only fills an absent
	// field, and an explicit 0 is omitted by Go's omitempty, so it is
	// sent raw here.
	t.Run("workersPerPod explicit 0", func(t *testing.T) {
		raw := env.Clientset.RESTClient().Post().AbsPath("/apis/ate.substrate.dev/v1alpha1/namespaces/default/workerpools").
			Body([]byte(`{"apiVersion":"ate.substrate.dev/v1alpha1","kind":"WorkerPool","metadata":{"name":"zero"},"spec":{"workersPerPod":0}}`)).
			SetHeader("Content-Type", "application/json").Do(ctx)
		if err := raw.Error(); err == nil || !strings.Contains(err.Error(), "spec.workersPerPod") {
			t.Fatalf("got %v, want spec.workersPerPod refused", err)
		}
	})

	t.Run("sandboxClass immutable", func(t *testing.T) {
		p := valid("immutable")
		if err := env.Client.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
		before := p.DeepCopy()
		p.Spec.SandboxClass = "other"
		err := env.Client.Patch(ctx, p, client.MergeFrom(before))
		if err == nil || !strings.Contains(err.Error(), "sandboxClass is immutable") {
			t.Fatalf("got %v, want sandboxClass is immutable", err)
		}
	})
}

// TestSandboxConfigValidation: assets must include runsc, digests are
// 64 hex digits, URLs http(s) or file.
func TestSandboxConfigValidation(t *testing.T) {
	asset := func() atek8s.RuntimeAsset {
		return atek8s.RuntimeAsset{Name: "runsc", Architecture: "amd64", URL: "https://x/runsc", SHA256: strings.Repeat("a", 64)}
	}
	tests := []struct {
		name  string
		asset func() atek8s.RuntimeAsset
		want  string
	}{
		{name: "valid", asset: asset},
		{name: "short digest", asset: func() atek8s.RuntimeAsset { a := asset(); a.SHA256 = "abc"; return a }, want: "spec.assets[0].sha256"},
		{name: "ftp url", asset: func() atek8s.RuntimeAsset { a := asset(); a.URL = "ftp://x"; return a }, want: "spec.assets[0].url"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := &atek8s.SandboxConfig{ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(tc.name, " ", "-")},
				Spec: atek8s.SandboxConfigSpec{Assets: []atek8s.RuntimeAsset{tc.asset()}}}
			err := env.Client.Create(context.Background(), sc)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
