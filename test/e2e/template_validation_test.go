package e2e

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestTemplateValidation: through `ate create template`, a template that
// would pass its golden build yet never serve is refused with a message
// naming the field, a template without ports gets the ports its image
// exposes (shown by `ate get template -o yaml`) and serves, and one whose
// image path does not exist is refused naming the path, not accepted and
// FAILED later.
func TestTemplateValidation(t *testing.T) {
	in := startUp(t, 1)
	counter := filepath.Join(repoDir, "build/images/counter")
	write := func(name, yaml string) string {
		file := filepath.Join(t.TempDir(), name+".yaml")
		if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		return file
	}
	for _, tc := range []struct {
		name, yaml, want string
	}{
		{"probe-elsewhere", "name: probe-elsewhere\ncontainers:\n- name: c\n  image: oci:" + counter +
			"\n  ports: [9090]\nwakeupProbe:\n  httpGet: {path: /healthz, port: 8080}\n",
			"wakeupProbe.httpGet.port 8080 is not the port traffic goes to"},
		{"no-image", "name: no-image\ncontainers:\n- name: c\n  image: oci:/nonexistent/images/app\n  ports: [8080]\n",
			"/nonexistent/images/app"},
		// A host path outside ate up's image roots (build/images by
		// default): refused without opening it.
		{"host-path", "name: host-path\ncontainers:\n- name: c\n  image: oci-archive:/etc/passwd\n  ports: [8080]\n",
			"/etc/passwd is not under an image root"},
		// Egress into the cluster's private networks, or to everything,
		// and a priority above other tenants': beyond ate up's default
		// operator ceilings.
		{"egress-everything", "name: egress-everything\ncontainers:\n- name: c\n  image: oci:" + counter +
			"\n  ports: [8080]\nnetwork:\n  egress:\n  - {cidr: 0.0.0.0/0}\n",
			"network.egress[0].cidr: egress beyond the operator's ceiling: 0.0.0.0/0 includes 10.0.0.0/8"},
		{"egress-private", "name: egress-private\ncontainers:\n- name: c\n  image: oci:" + counter +
			"\n  ports: [8080]\nnetwork:\n  egress:\n  - {cidr: 192.0.2.0/24}\n  - {cidr: 10.0.0.0/8, ports: [5432]}\n",
			"network.egress[1].cidr: egress beyond the operator's ceiling: 10.0.0.0/8 is in 10.0.0.0/8"},
		{"priority", "name: priority\ncontainers:\n- name: c\n  image: oci:" + counter +
			"\n  ports: [8080]\neviction: {priority: 5}\n",
			"eviction.priority 5 is above 0, the highest atespace default may set"},
		{"bad-streams", "name: bad-streams\ncontainers:\n- name: c\n  image: oci:" + counter +
			"\n  ports: [8080]\nstreams: {wakeOn: never}\n",
			`streams.wakeOn "never": want any or request`},
	} {
		out, err := in.ateErr("create", "template", "-f", write(tc.name, tc.yaml))
		if err == nil || !strings.Contains(out, tc.want) || !strings.Contains(out, "InvalidArgument") && !strings.Contains(strings.ToLower(out), "invalid") {
			t.Errorf("ate create template %s: %v\n%s\nwant a failure saying %q", tc.name, err, out, tc.want)
		}
		if out, err := in.ateErr("get", "template", tc.name); err == nil {
			t.Errorf("refused template %s exists:\n%s", tc.name, out)
		}
	}

	in.ate("create", "template", "-f", write("portless", "name: portless\ncontainers:\n- name: c\n  image: oci:"+counter+
		"\nwakeupProbe:\n  httpGet: {path: /healthz, port: 8080}\n"))
	in.waitTemplateReady("portless")
	if out := in.ate("get", "template", "portless", "-o", "yaml"); !strings.Contains(out, "ports:\n    - 8080") {
		t.Errorf("ate get template portless -o yaml does not show the image's port 8080:\n%s", out)
	}
	in.ate("create", "actor", "p-1", "--template", "portless")
	if code, body := in.get("default/p-1", "/"); code != http.StatusOK || strings.TrimSpace(body) != "count=1" {
		t.Fatalf("GET p-1 = %d %q, want 200 count=1", code, body)
	}
}
