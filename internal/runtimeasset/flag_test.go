package runtimeasset

import (
	"strings"
	"testing"
)

const (
	sumA = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	sumB = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"
)

func TestParseFlag(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        Asset
		err         string
	}{
		{"https", "amd64=" + sumA + "@https://example.com/runsc",
			Asset{Name: "runsc", Architecture: "amd64", SHA256: sumA, URL: "https://example.com/runsc"}, ""},
		{"http with port", "arm64=" + sumA + "@http://10.0.0.5:8080/gvisor/arm64/runsc",
			Asset{Name: "runsc", Architecture: "arm64", SHA256: sumA, URL: "http://10.0.0.5:8080/gvisor/arm64/runsc"}, ""},
		{"file", "amd64=" + sumA + "@file:///opt/gvisor/runsc",
			Asset{Name: "runsc", Architecture: "amd64", SHA256: sumA, URL: "file:///opt/gvisor/runsc"}, ""},
		{"user info in URL keeps its @", "amd64=" + sumA + "@https://u:p@example.com/runsc",
			Asset{Name: "runsc", Architecture: "amd64", SHA256: sumA, URL: "https://u:p@example.com/runsc"}, ""},
		{"empty", "", Asset{}, "want ARCH=SHA256@URL"},
		{"no arch", sumA + "@https://example.com/runsc", Asset{}, "want ARCH=SHA256@URL"},
		{"no URL", "amd64=" + sumA, Asset{}, "no @URL after the digest"},
		{"uname arch", "x86_64=" + sumA + "@https://example.com/runsc", Asset{}, `architecture "x86_64": want a GOARCH value gVisor runs on, amd64 or arm64`},
		{"short digest", "amd64=abc@https://example.com/runsc", Asset{}, `sha256 "abc": want 64 lowercase hex digits`},
		{"upper-case digest", "amd64=" + strings.ToUpper(sumA) + "@https://example.com/runsc", Asset{}, "want 64 lowercase hex digits"},
		{"sha256: prefix", "amd64=sha256:" + sumA + "@https://example.com/runsc", Asset{}, "want 64 lowercase hex digits"},
		{"ftp", "amd64=" + sumA + "@ftp://example.com/runsc", Asset{}, "want https://, http:// or file://"},
		{"plain path", "amd64=" + sumA + "@/opt/runsc", Asset{}, "want https://, http:// or file://"},
		{"no host", "amd64=" + sumA + "@https:///runsc", Asset{}, "no host"},
		{"relative file", "amd64=" + sumA + "@file:runsc", Asset{}, "want file:///absolute/path"},
		{"file on another host", "amd64=" + sumA + "@file://other/opt/runsc", Asset{}, "names a file on this machine"},
		{"long URL", "amd64=" + sumA + "@https://example.com/" + strings.Repeat("a", maxURLLen), Asset{}, "at most 2048"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFlag("runsc", tc.value)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseFlag(%q) = %+v, %v; want error containing %q", tc.value, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseFlag(%q) = %+v, %v; want %+v", tc.value, got, err, tc.want)
			}
		})
	}
}

func TestParseFlags(t *testing.T) {
	amd := "amd64=" + sumA + "@https://example.com/amd64/runsc"
	arm := "arm64=" + sumB + "@https://example.com/arm64/runsc"
	for _, tc := range []struct {
		name   string
		values []string
		want   int
		err    string
	}{
		{"none", nil, 0, ""},
		{"one per architecture", []string{amd, arm}, 2, ""},
		{"same architecture twice", []string{amd, "amd64=" + sumB + "@https://example.com/runsc"}, 0, "a second runsc for amd64: give one value per architecture"},
		{"one malformed", []string{amd, "arm64"}, 0, `"arm64": want ARCH=SHA256@URL`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseFlags("runsc", tc.values)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("ParseFlags = %+v, %v; want error containing %q", got, err, tc.err)
				}
				return
			}
			if err != nil || len(got) != tc.want {
				t.Fatalf("ParseFlags = %+v, %v; want %d assets", got, err, tc.want)
			}
		})
	}
}
