package snapshot

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRef(t *testing.T) {
	digest := ManifestDigest([]byte("{}"))
	for _, tc := range []struct {
		ref, bare, digest string
		ok                bool
	}{
		{"a-uid/20260101T000000.000Z-00", "a-uid/20260101T000000.000Z-00", "", true},
		{"a-uid/id@" + digest, "a-uid/id", digest, true},
		{"a-uid/id@", "", "", false},
		{"a-uid/id@sha256:", "", "", false},
		{"a-uid/id@sha256:" + strings.Repeat("0", 63), "", "", false},
		{"a-uid/id@sha256:" + strings.Repeat("g", 64), "", "", false},
		{"a-uid/id@md5:" + strings.Repeat("0", 64), "", "", false},
		{"a-uid/id@" + digest + "@" + digest, "", "", false},
		{"a-uid@" + digest, "", "", false},
		{"../x@" + digest, "", "", false},
	} {
		t.Run(tc.ref, func(t *testing.T) {
			bare, d, err := ParseRef(tc.ref)
			if !tc.ok {
				if !errors.Is(err, ErrNotFound) {
					t.Fatalf("ParseRef = %q, %q, %v; want ErrNotFound", bare, d, err)
				}
				return
			}
			if err != nil || bare != tc.bare || d != tc.digest {
				t.Fatalf("ParseRef = %q, %q, %v; want %q, %q", bare, d, err, tc.bare, tc.digest)
			}
			if Bare(tc.ref) != tc.bare {
				t.Fatalf("Bare = %q, want %q", Bare(tc.ref), tc.bare)
			}
		})
	}
}

// BenchmarkOpenDigest is the cost the manifest digest adds to an
// activation's Open (Local, a counter-sized snapshot's manifest): the
// recorded reference against the same snapshot by its bare reference,
// which skips the check.
func BenchmarkOpenDigest(b *testing.B) {
	l, err := NewLocal(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	st, err := l.Stage("a-uid", "")
	if err != nil {
		b.Fatal(err)
	}
	// The files of a counter checkpoint and its volume, in name only:
	// Open reads the manifest and stats the files, it does not read them.
	for _, name := range []string{"checkpoint.img", "pages.img", "pages_meta.img", "rootfs-upper.tar", "config.json", "volumes/data/a", "volumes/data/b"} {
		p := filepath.Join(st.Dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	ref, err := l.Commit(context.Background(), st, ScopeFull)
	if err != nil {
		b.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(l.dir, Bare(ref), ManifestName))
	if err != nil {
		b.Fatal(err)
	}
	b.Run("sha256-of-manifest", func(b *testing.B) {
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			_ = ManifestDigest(data)
		}
	})
	for _, bc := range []struct{ name, ref string }{{"recorded", ref}, {"bare", Bare(ref)}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				o, err := l.Open(context.Background(), bc.ref)
				if err != nil {
					b.Fatal(err)
				}
				o.Close()
			}
		})
	}
}
