package image

import (
	"errors"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	tests := []struct {
		in        string
		transport Transport
		path, tag string
		str       string // String(), "" means same as in
	}{
		{in: "oci:build/images/counter", transport: TransportOCI, path: "build/images/counter"},
		{in: "oci:/abs/dir:v1", transport: TransportOCI, path: "/abs/dir", tag: "v1"},
		{in: "oci-archive:/tmp/x.tar", transport: TransportOCIArchive, path: "/tmp/x.tar"},
		{in: "oci-archive:x.tar:latest", transport: TransportOCIArchive, path: "x.tar", tag: "latest"},
		{in: "127.0.0.1:5000/counter:latest", transport: TransportRegistry},
		{in: "alpine", transport: TransportRegistry, str: "index.docker.io/library/alpine:latest"},
		{in: "docker://ghcr.io/a/b:c", transport: TransportRegistry, str: "ghcr.io/a/b:c"},
		{in: "registry.example/repo@sha256:" + strings.Repeat("ab", 32), transport: TransportRegistry},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			r, err := ParseRef(tt.in)
			if err != nil {
				t.Fatal(err)
			}
			if r.Transport != tt.transport || r.Path != tt.path || r.Tag != tt.tag {
				t.Errorf("got %+v", r)
			}
			want := tt.str
			if want == "" {
				want = tt.in
			}
			if r.String() != want {
				t.Errorf("String() = %q, want %q", r.String(), want)
			}
		})
	}
}

func TestParseRefErrors(t *testing.T) {
	tests := []struct {
		name, in string
		mention  string // the error must name the problem
	}{
		{"empty", "", "empty reference"},
		{"oci without path", "oci:", "empty path"},
		{"oci empty tag", "oci:/dir:", "empty tag"},
		{"archive without path", "oci-archive:", "empty path"},
		{"docker prefix only", "docker://", "empty registry reference"},
		{"uppercase repo", "Registry.example/Repo:tag", "repository"},
		{"bad digest", "repo@sha256:xyz", "digest"},
		{"unknown transport", "dir:/tmp/x", "want oci:PATH"},
		{"bad tag", "repo:ta g", "tag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRef(tt.in)
			if !errors.Is(err, ErrBadRef) {
				t.Fatalf("ParseRef(%q) = %v, want ErrBadRef", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.mention) {
				t.Errorf("error %q does not mention %q", err, tt.mention)
			}
		})
	}
}
