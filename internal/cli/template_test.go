package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	atev1 "substrate.dev/ate/api/ate/v1"
)

const fullTemplate = `name: counter
containers:
- name: counter
  image: oci:build/images/counter
  command: ["/counter"]
  args: ["-v"]
  env: {K: V}
  ports: [8080]
  workingDir: /srv
wakeupProbe:
  httpGet: {path: /healthz, port: 8080}
  timeoutSeconds: 30
  afterRestore: skip
sandboxClass: gvisor
workerSelector: {zone: a}
`

func TestParseTemplate(t *testing.T) {
	got, err := parseTemplate([]byte(fullTemplate), "/work")
	if err != nil {
		t.Fatal(err)
	}
	want := &atev1.ActorTemplate{Name: "counter", Spec: &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{
			Name: "counter", Image: "oci:/work/build/images/counter", Command: []string{"/counter"},
			Args: []string{"-v"}, Env: map[string]string{"K": "V"}, Ports: []int32{8080}, WorkingDir: "/srv",
		}},
		WakeupProbe:    &atev1.Probe{HttpGet: &atev1.HTTPGetAction{Path: "/healthz", Port: 8080}, TimeoutSeconds: 30, AfterRestore: "skip"},
		SandboxClass:   "gvisor",
		WorkerSelector: map[string]string{"zone": "a"},
	}}
	if !proto.Equal(got, want) {
		t.Errorf("got %v\nwant %v", got, want)
	}
}

func TestResolveImage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"oci:build/images/counter", "oci:/base/build/images/counter"},
		{"oci:./counter:v1", "oci:/base/counter:v1"},
		{"oci:../up/counter", "oci:/up/counter"},
		{"oci:/abs/counter:v1", "oci:/abs/counter:v1"},
		{"oci-archive:counter.tar", "oci-archive:/base/counter.tar"},
		{"oci-archive:/abs/counter.tar", "oci-archive:/abs/counter.tar"},
		{"registry.example/repo:tag", "registry.example/repo:tag"},
		{"ghcr.io/x/y@sha256:abc", "ghcr.io/x/y@sha256:abc"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := resolveImage(tc.in, "/base")
			if err != nil || got != tc.want {
				t.Errorf("resolveImage(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseTemplateErrors(t *testing.T) {
	const c = "containers:\n- name: c\n  image: oci:x\n"
	for _, tc := range []struct{ name, yaml, want string }{
		{"unknown container field", "name: t\ncontainers:\n- name: c\n  image: oci:x\n  imagePullPolicy: Always\n", `unknown field "imagePullPolicy"`},
		{"unknown top-level field", "name: t\nstatus: {phase: READY}\n" + c, `unknown field "status"`},
		{"snake_case rejected", "name: t\nsandbox_class: fake\n" + c, `unknown field "sandbox_class"`},
		{"duplicate field", "name: t\nname: u\n" + c, `"name" already set`},
		{"missing name", c, "template name must not be empty"},
		{"bad name", "name: Counter\n" + c, `template name "Counter" must be a DNS-1123 label`},
		{"no containers", "name: t\n", "at least one container"},
		{"bad container name", "name: t\ncontainers:\n- name: C\n  image: oci:x\n", `containers[0]: invalid name: container name "C"`},
		{"no image", "name: t\ncontainers:\n- name: c\n", "containers[0]: image is required"},
		{"empty oci path", "name: t\ncontainers:\n- name: c\n  image: 'oci:'\n", `names no path`},
		{"bad port", "name: t\ncontainers:\n- name: c\n  image: oci:x\n  ports: [70000]\n", "port 70000 is not in 1-65535"},
		{"bad probe port", "name: t\n" + c + "wakeupProbe:\n  httpGet: {path: /, port: 0}\n", "wakeupProbe.httpGet.port"},
		{"ports not ints", "name: t\ncontainers:\n- name: c\n  image: oci:x\n  ports: [http]\n", "parse: containers.ports must be a whole number, not a string"},
		{"wrong type names the field, no Go", "name: t\n" + c + "eviction: {priority: high}\n", "parse: eviction.priority must be a whole number, not a string"},
		{"env as a list says how to write it", "name: t\ncontainers:\n- name: c\n  image: oci:x\n  env:\n  - {name: A, value: b}\n", `parse: containers.env must be a mapping, not a list (write env as NAME: value pairs, e.g. env: {STATE_MB: "64"})`},
		{"typo names the key, no JSON", "name: t\n" + c + "eviction: {evictible: false}\n", `parse: unknown field "evictible"`},
		{"two documents", "name: t\n" + c + "---\nname: u\n" + c, "parse: the file holds 2 YAML documents"},
		{"yaml syntax", "name: t\n" + c + "eviction: {priority: 1\n", "parse: yaml: line"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseTemplate([]byte(tc.yaml), "/base")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err = %v, want it to contain %q", err, tc.want)
			}
			if err != nil && (strings.Contains(err.Error(), "JSON") || strings.Contains(err.Error(), "Go struct")) {
				t.Errorf("err = %v speaks of the decoder, not the file", err)
			}
		})
	}
}

// TestLoadTemplateFile checks relative image paths resolve against the
// working directory, not the file's directory.
func TestLoadTemplateFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "sub", "t.yaml")
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, file, "name: t\ncontainers:\n- name: c\n  image: oci:images/c\n")
	cwd := t.TempDir()
	t.Chdir(cwd)
	got, err := LoadTemplateFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if img, want := got.GetSpec().GetContainers()[0].GetImage(), "oci:"+filepath.Join(cwd, "images/c"); img != want {
		t.Errorf("image %q, want %q", img, want)
	}
	if _, err := LoadTemplateFile(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "read template") {
		t.Errorf("missing file: %v", err)
	}
}

// TestParseTemplateRoutingFields: the router's fields reach the spec as
// written (the server validates them).
func TestParseTemplateRoutingFields(t *testing.T) {
	const doc = "name: t\ncontainers:\n- name: c\n  image: oci:/x\n" +
		"routeTimeoutSeconds: 30\nstreamIdleTimeoutSeconds: 5\nidle: {after: 10m, action: pause}\n"
	got, err := parseTemplate([]byte(doc), "/base")
	if err != nil {
		t.Fatal(err)
	}
	want := &atev1.ActorTemplateSpec{
		Containers:          []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x"}},
		RouteTimeoutSeconds: 30, StreamIdleTimeoutSeconds: 5,
		Idle: &atev1.IdlePolicy{After: "10m", Action: "pause"},
	}
	if !proto.Equal(got.GetSpec(), want) {
		t.Errorf("got %v\nwant %v", got.GetSpec(), want)
	}
	if _, err := parseTemplate([]byte(doc+"idle_after: 1m\n"), "/base"); err == nil || !strings.Contains(err.Error(), `unknown field "idle_after"`) {
		t.Errorf("misspelt field: %v", err)
	}
}

// TestParseTemplateLifecycleFields: volumes, mounts, the snapshot policy and
// the drain grace reach the spec as written (the server validates them).
func TestParseTemplateLifecycleFields(t *testing.T) {
	const doc = "name: t\nvolumes: [{name: data}]\n" +
		"containers:\n- name: c\n  image: oci:/x\n  volumeMounts: [{name: data, mountPath: /data}]\n" +
		"snapshotPolicy: {onPause: Full, onSuspend: Data}\ndrainGraceSeconds: 10\n"
	got, err := parseTemplate([]byte(doc), "/base")
	if err != nil {
		t.Fatal(err)
	}
	want := &atev1.ActorTemplateSpec{
		Containers: []*atev1.ContainerSpec{{Name: "c", Image: "oci:/x",
			VolumeMounts: []*atev1.VolumeMount{{Name: "data", MountPath: "/data"}}}},
		Volumes:           []*atev1.Volume{{Name: "data"}},
		SnapshotPolicy:    &atev1.SnapshotPolicy{OnPause: "Full", OnSuspend: "Data"},
		DrainGraceSeconds: 10,
	}
	if !proto.Equal(got.GetSpec(), want) {
		t.Errorf("got %v\nwant %v", got.GetSpec(), want)
	}
}
