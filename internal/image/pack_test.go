package image

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/types"
)

func TestPackEnsureRoundTrip(t *testing.T) {
	tests := []struct {
		name        string
		compression Compression
		dest        string
		mediaType   types.MediaType
	}{
		{"gzip at root", CompressionGzip, "/", types.OCILayer},
		{"none at root", CompressionNone, "/", types.OCIUncompressedLayer},
		{"gzip under prefix", CompressionGzip, "/opt/app", types.OCILayer},
		{"default compression", "", "", types.OCILayer},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			tmp := t.TempDir()
			src := filepath.Join(tmp, "src")
			writeFiles(t, src)
			out := filepath.Join(tmp, "img")
			opts := PackOptions{
				Out:          out,
				Sources:      []PackSource{{Src: src, Dest: tt.dest}},
				Entrypoint:   []string{"/bin/tool"},
				Cmd:          []string{"--flag", "x"},
				Env:          []string{"PATH=/bin", "A=b=c"},
				WorkingDir:   "/etc",
				ExposedPorts: []int{9090, 8080},
				Compression:  tt.compression,
			}
			if err := Pack(ctx, opts); err != nil {
				t.Fatal(err)
			}
			checkLayerMediaType(t, out, tt.mediaType)

			c := NewCache(filepath.Join(tmp, "cache"), nil)
			img, err := c.Ensure(ctx, "oci:"+out)
			if err != nil {
				t.Fatal(err)
			}
			if img.Digest != layoutDigest(t, out) {
				t.Errorf("digest %s, layout says %s", img.Digest, layoutDigest(t, out))
			}
			if !filepath.IsAbs(img.RootFS) || filepath.Base(img.RootFS) != strings.TrimPrefix(img.Digest, "sha256:") {
				t.Errorf("RootFS %s: want absolute path named after the digest", img.RootFS)
			}
			want := Config{
				Entrypoint: opts.Entrypoint, Cmd: opts.Cmd, Env: opts.Env,
				WorkingDir: "/etc", ExposedPorts: []int{8080, 9090},
			}
			if !configEqual(img.Config, want) {
				t.Errorf("config %+v, want %+v", img.Config, want)
			}

			compareTrees(t, expectedTree(t, src, tt.dest), snapshot(t, img.RootFS))
			for p, st := range snapshot(t, img.RootFS) {
				if st.mode&fs.ModeSymlink == 0 && !st.mtime.Equal(packEpoch) {
					t.Errorf("%s: mtime %v, want the fixed epoch", p, st.mtime)
				}
			}
			if fi, err := os.Stat(img.RootFS); err != nil || fi.Mode().Perm() != 0o755 {
				t.Errorf("rootfs root mode: %v %v, want 0755", fi.Mode(), err)
			}
			noStrayTemps(t, c.dir)
		})
	}
}

// expectedTree is snapshot(src) as it should appear in an image with src
// packed at dest: names prefixed, plus dest and its parents as directories.
func expectedTree(t *testing.T, src, dest string) map[string]fileState {
	t.Helper()
	prefix := destName(dest)
	want := map[string]fileState{}
	for p, st := range snapshot(t, src) {
		if st.group != "" {
			st.group = path.Join(prefix, st.group)
		}
		want[path.Join(prefix, p)] = st
	}
	if prefix != "" {
		fi, err := os.Stat(src)
		if err != nil {
			t.Fatal(err)
		}
		want[prefix] = fileState{mode: fi.Mode()}
		for d := path.Dir(prefix); d != "."; d = path.Dir(d) {
			want[d] = fileState{mode: fs.ModeDir | 0o755}
		}
	}
	return want
}

func configEqual(a, b Config) bool {
	return slices.Equal(a.Entrypoint, b.Entrypoint) && slices.Equal(a.Cmd, b.Cmd) &&
		slices.Equal(a.Env, b.Env) && a.WorkingDir == b.WorkingDir && slices.Equal(a.ExposedPorts, b.ExposedPorts)
}

func checkLayerMediaType(t *testing.T, dir string, want types.MediaType) {
	t.Helper()
	img, desc := onlyImage(t, dir)
	if got := desc.Annotations[annotationRefName]; got != "latest" {
		t.Errorf("ref.name annotation %q, want latest", got)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Layers) != 1 || m.Layers[0].MediaType != want || m.MediaType != types.OCIManifestSchema1 {
		t.Errorf("manifest %s with layers %+v, want one %s layer", m.MediaType, m.Layers, want)
	}
}

func TestPackDeterministic(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	writeFiles(t, src)
	pack := func(name string, keep bool) string {
		out := filepath.Join(tmp, name)
		if err := Pack(ctx, PackOptions{Out: out, Sources: []PackSource{{Src: src}}, KeepMTimes: keep, Cmd: []string{"x"}}); err != nil {
			t.Fatal(err)
		}
		return layoutDigest(t, out)
	}
	touch := func(ago time.Duration) {
		when := time.Now().Add(-ago).Truncate(time.Second)
		if err := os.Chtimes(filepath.Join(src, "etc/config"), when, when); err != nil {
			t.Fatal(err)
		}
	}

	first := pack("a", false)
	touch(time.Hour)
	if again := pack("b", false); again != first {
		t.Errorf("repack after touching a file: digest %s, first %s", again, first)
	}
	if again := pack("a", false); again != first {
		t.Errorf("repack into the same (replaced) layout: digest %s, first %s", again, first)
	}
	kept := pack("c", true)
	if kept == first {
		t.Error("KeepMTimes gave the fixed-epoch digest")
	}
	if again := pack("d", true); again != kept {
		t.Errorf("KeepMTimes repack of unchanged input: digest %s, first %s", again, kept)
	}
	touch(2 * time.Hour)
	if again := pack("e", true); again == kept {
		t.Error("KeepMTimes digest did not change with a file's mtime")
	}
}

func TestPackSources(t *testing.T) {
	ctx := context.Background()
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	writeFiles(t, root)
	notes := filepath.Join(tmp, "notes.py")
	override := filepath.Join(tmp, "config")
	for p, s := range map[string]string{notes: "print('hi')\n", override: "a=2\n"} {
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := filepath.Join(tmp, "img")
	err := Pack(ctx, PackOptions{Out: out, Compression: CompressionNone, Sources: []PackSource{
		{Src: root, Dest: "/"},
		{Src: notes, Dest: "/app/notes.py"},
		{Src: override, Dest: "/etc/config"}, // later source wins
		{Src: override, Dest: "/a/b"},        // a file replacing a directory drops its contents
	}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := NewCache(filepath.Join(tmp, "cache"), nil).Ensure(ctx, "oci:"+out+":latest")
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]string{"app/notes.py": "print('hi')\n", "etc/config": "a=2\n", "a/b": "a=2\n", "bin/tool": "#!/bin/sh\necho hi\n"} {
		b, err := os.ReadFile(filepath.Join(img.RootFS, p))
		if err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", p, b, err, want)
		}
	}
	if fi, err := os.Stat(filepath.Join(img.RootFS, "app")); err != nil || fi.Mode() != fs.ModeDir|0o755 {
		t.Errorf("made-up parent /app: %v %v, want a 0755 directory", fi.Mode(), err)
	}
}

func TestPackErrors(t *testing.T) {
	tmp := t.TempDir()
	src := filepath.Join(tmp, "src")
	writeFiles(t, src)
	notLayout := filepath.Join(tmp, "precious")
	if err := os.MkdirAll(notLayout, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notLayout, "keep"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	ok := []PackSource{{Src: src}}
	out := filepath.Join(tmp, "out")
	tests := []struct {
		name    string
		opts    PackOptions
		mention string
	}{
		{"no out", PackOptions{Sources: ok}, "no output"},
		{"no sources", PackOptions{Out: out}, "no sources"},
		{"bad compression", PackOptions{Out: out, Sources: ok, Compression: "zstd"}, "compression"},
		{"bad env", PackOptions{Out: out, Sources: ok, Env: []string{"NOEQUALS"}}, "KEY=VALUE"},
		{"bad port", PackOptions{Out: out, Sources: ok, ExposedPorts: []int{70000}}, "port"},
		{"missing source", PackOptions{Out: out, Sources: []PackSource{{Src: filepath.Join(tmp, "nope")}}}, "nope"},
		{"file at root", PackOptions{Out: out, Sources: []PackSource{{Src: filepath.Join(src, "etc/config")}}}, "is a file"},
		{"replace non-layout", PackOptions{Out: notLayout, Sources: ok}, "not an OCI layout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Pack(context.Background(), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.mention) {
				t.Fatalf("Pack = %v, want an error mentioning %q", err, tt.mention)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(notLayout, "keep")); err != nil {
		t.Errorf("refused Pack touched the directory: %v", err)
	}
	if ents, _ := os.ReadDir(tmp); len(ents) != 2 {
		t.Errorf("failed Packs left files behind: %v", ents)
	}
	if err := Pack(context.Background(), PackOptions{Out: out, Sources: ok}); err != nil {
		t.Fatal(err)
	}
	if err := Pack(context.Background(), PackOptions{Out: out, Sources: ok}); err != nil {
		t.Errorf("replacing an earlier layout: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Pack(ctx, PackOptions{Out: filepath.Join(tmp, "canceled"), Sources: ok}); !errors.Is(err, context.Canceled) {
		t.Errorf("Pack with a canceled context = %v", err)
	}
}
