package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"

	yamlv2 "go.yaml.in/yaml/v2"
	"sigs.k8s.io/yaml"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/names"
)

// templateFile is the YAML a user writes for `ate create template -f`:
//
//	name: counter
//	containers:
//	- name: counter
//	  image: oci:build/images/counter
//	  command: ["/counter"]
//	  ports: [8080]
//	wakeupProbe:
//	  httpGet: {path: /healthz, port: 8080}
//
// It is a separate type rather than protojson over ActorTemplate so the file
// format is exactly what is documented: server-owned fields (uid, status) and
// snake_case spellings are rejected instead of silently accepted.
type templateFile struct {
	Name           string            `json:"name"`
	Containers     []containerFile   `json:"containers"`
	WakeupProbe    *probeFile        `json:"wakeupProbe,omitempty"`
	SandboxClass   string            `json:"sandboxClass,omitempty"`
	WorkerSelector map[string]string `json:"workerSelector,omitempty"`
	lifecycleFields
	routingFields
	networkFields
}

type containerFile struct {
	Name       string            `json:"name"`
	Image      string            `json:"image"`
	Command    []string          `json:"command,omitempty"`
	Args       []string          `json:"args,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Ports      []int32           `json:"ports,omitempty"`
	WorkingDir string            `json:"workingDir,omitempty"`
	// VolumeMounts mount the template's durable volumes.
	VolumeMounts []volumeMountFile `json:"volumeMounts,omitempty"`
}

type probeFile struct {
	HTTPGet        *httpGetFile `json:"httpGet,omitempty"`
	TimeoutSeconds int32        `json:"timeoutSeconds,omitempty"`
	// AfterRestore is probe (default) or skip; the API server checks it.
	AfterRestore string `json:"afterRestore,omitempty"`
}

type httpGetFile struct {
	Path string `json:"path"`
	Port int32  `json:"port"`
}

// Image reference prefixes that name paths on the client's disk.
var localImagePrefixes = []string{"oci:", "oci-archive:"}

// LoadTemplateFile reads an actor template from a YAML file ("-" is not
// special here; callers handle stdin). Unknown fields are errors, so a typo
// does not silently drop a setting. Relative oci: and oci-archive: image
// paths are made absolute against the current directory, because the server
// that opens them may run in a different directory. The result has no
// atespace set; the caller fills it in.
func LoadTemplateFile(path string) (*atev1.ActorTemplate, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read template: %w", err)
	}
	cwd, err := os.Getwd()
	if err != nil {
		return nil, fmt.Errorf("resolve image paths: %w", err)
	}
	t, err := parseTemplate(data, cwd)
	if err != nil {
		return nil, fmt.Errorf("template %s: %w", path, err)
	}
	return t, nil
}

// documents counts the YAML documents in data; sigs.k8s.io/yaml reads
// only the first, and a second template in the file must not be dropped
// without a word. Errors are left for the strict decode to report.
func documents(data []byte) (int, error) {
	dec := yamlv2.NewDecoder(bytes.NewReader(data))
	n := 0
	for {
		var doc any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if doc != nil {
			n++
		}
	}
}

// yamlError restates a decoding error of sigs.k8s.io/yaml (which decodes
// YAML by way of JSON) in the file's terms: the field's path as written,
// no "JSON" and no Go type or struct names.
func yamlError(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		field := te.Field
		for _, embedded := range []string{"routingFields.", "lifecycleFields.", "networkFields."} {
			field = strings.ReplaceAll(field, embedded, "")
		}
		want := te.Type.String()
		switch te.Type.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
			reflect.Uint16, reflect.Uint32, reflect.Uint64:
			want = "a whole number"
		case reflect.Bool:
			want = "true or false"
		case reflect.String:
			want = "a string"
		case reflect.Slice:
			want = "a list"
		case reflect.Map, reflect.Struct, reflect.Pointer:
			want = "a mapping"
		}
		// te.Value is a JSON type name; say it in the YAML words of want.
		got := map[string]string{"array": "a list", "object": "a mapping", "number": "a number", "string": "a string", "bool": "true or false"}[te.Value]
		if got == "" {
			got = "a " + te.Value
		}
		hint := ""
		if strings.HasSuffix(field, ".env") && want == "a mapping" {
			hint = ` (write env as NAME: value pairs, e.g. env: {STATE_MB: "64"})`
		}
		return fmt.Errorf("%s must be %s, not %s%s", field, want, got, hint)
	}
	msg := err.Error()
	for _, prefix := range []string{"error unmarshaling JSON: while decoding JSON: json: ", "error converting YAML to JSON: "} {
		msg = strings.TrimPrefix(msg, prefix)
	}
	return errors.New(msg)
}

// parseTemplate decodes and checks a template file, resolving relative local
// image paths against baseDir.
func parseTemplate(data []byte, baseDir string) (*atev1.ActorTemplate, error) {
	if n, err := documents(data); err == nil && n > 1 {
		return nil, fmt.Errorf("parse: the file holds %d YAML documents; one template per file", n)
	}
	var f templateFile
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return nil, fmt.Errorf("parse: %w", yamlError(err))
	}
	if err := names.ValidateLabel("template name", f.Name); err != nil {
		return nil, err
	}
	if len(f.Containers) == 0 {
		return nil, fmt.Errorf("containers: at least one container is required")
	}
	spec := &atev1.ActorTemplateSpec{SandboxClass: f.SandboxClass, WorkerSelector: f.WorkerSelector}
	for i, c := range f.Containers {
		cs, err := c.spec(baseDir)
		if err != nil {
			return nil, fmt.Errorf("containers[%d]: %w", i, err)
		}
		spec.Containers = append(spec.Containers, cs)
	}
	if p := f.WakeupProbe; p != nil {
		spec.WakeupProbe = &atev1.Probe{TimeoutSeconds: p.TimeoutSeconds, AfterRestore: p.AfterRestore}
		if p.TimeoutSeconds < 0 {
			return nil, fmt.Errorf("wakeupProbe.timeoutSeconds must not be negative")
		}
		if g := p.HTTPGet; g != nil {
			if err := checkPort(g.Port); err != nil {
				return nil, fmt.Errorf("wakeupProbe.httpGet.port: %w", err)
			}
			spec.WakeupProbe.HttpGet = &atev1.HTTPGetAction{Path: g.Path, Port: g.Port}
		}
	}
	f.lifecycleFields.apply(spec)
	f.routingFields.apply(spec)
	f.networkFields.apply(spec)
	return &atev1.ActorTemplate{Name: f.Name, Spec: spec}, nil
}

func (c containerFile) spec(baseDir string) (*atev1.ContainerSpec, error) {
	if err := names.ValidateLabel("container name", c.Name); err != nil {
		return nil, err
	}
	image, err := resolveImage(c.Image, baseDir)
	if err != nil {
		return nil, err
	}
	for _, p := range c.Ports {
		if err := checkPort(p); err != nil {
			return nil, fmt.Errorf("ports: %w", err)
		}
	}
	return &atev1.ContainerSpec{
		Name: c.Name, Image: image, Command: c.Command, Args: c.Args,
		Env: c.Env, Ports: c.Ports, WorkingDir: c.WorkingDir, VolumeMounts: c.volumeMounts(),
	}, nil
}

// resolveImage makes a local image path absolute against baseDir and leaves
// registry references alone. A ":TAG" after an OCI layout path rides along
// unchanged as part of the last path element.
func resolveImage(image, baseDir string) (string, error) {
	if image == "" {
		return "", fmt.Errorf("image is required")
	}
	for _, prefix := range localImagePrefixes {
		p, ok := strings.CutPrefix(image, prefix)
		if !ok {
			continue
		}
		if p == "" {
			return "", fmt.Errorf("image %q names no path", image)
		}
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		return prefix + p, nil
	}
	return image, nil
}

func checkPort(p int32) error {
	if p < 1 || p > 65535 {
		return fmt.Errorf("port %d is not in 1-65535", p)
	}
	return nil
}
