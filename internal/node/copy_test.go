package node

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestVolumePath(t *testing.T) {
	vols := []volume{{name: "data", hostDir: "/host/data", mountPaths: []string{"/data"}},
		{name: "cache", hostDir: "/host/cache", mountPaths: []string{"/var/cache/app/"}}}
	for _, tc := range []struct {
		path, dir, rel string
		bad            bool
	}{
		{path: "/data/a.txt", dir: "/host/data", rel: "a.txt"},
		{path: "/data/sub/b", dir: "/host/data", rel: "sub/b"},
		{path: "/data//sub/./b/", dir: "/host/data", rel: "sub/b"},
		{path: "/var/cache/app/x", dir: "/host/cache", rel: "x"},
		{path: "/data", bad: true},
		{path: "/datax/a", bad: true},
		{path: "/etc/passwd", bad: true},
		{path: "data/a.txt", bad: true},
		{path: "/data/../etc/passwd", bad: true},
		{path: "/data/sub/../../x", bad: true},
		{path: "/data/sub/..", bad: true},
	} {
		t.Run(tc.path, func(t *testing.T) {
			dir, rel, err := volumePath(vols, tc.path)
			if tc.bad {
				if !errors.Is(err, ErrBadPath) {
					t.Fatalf("volumePath(%q) = %q, %q, %v; want ErrBadPath", tc.path, dir, rel, err)
				}
				return
			}
			if err != nil || dir != tc.dir || rel != tc.rel {
				t.Fatalf("volumePath(%q) = %q, %q, %v; want %q, %q", tc.path, dir, rel, err, tc.dir, tc.rel)
			}
		})
	}
	if _, _, err := volumePath(nil, "/data/a"); !errors.Is(err, ErrBadPath) {
		t.Fatalf("no volumes: %v, want ErrBadPath", err)
	}
}

func TestStaysInside(t *testing.T) {
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "sub", "deep"), 0o755))
	must(os.Symlink("/etc", filepath.Join(dir, "abs")))
	must(os.Symlink("../../..", filepath.Join(dir, "sub", "up")))
	must(os.Symlink("deep", filepath.Join(dir, "sub", "in")))
	must(os.Symlink("../sub/in", filepath.Join(dir, "sub", "deep", "back")))
	must(os.Symlink("loop", filepath.Join(dir, "loop")))
	for _, tc := range []struct {
		rel string
		bad bool
	}{
		{rel: "new.txt"},
		{rel: "sub/deep/new.txt"},
		{rel: "sub/in/x"},
		{rel: "sub/deep/back/x"},
		{rel: "missing/dir/x"},
		{rel: "abs/passwd", bad: true},
		{rel: "sub/up/etc/passwd", bad: true},
		{rel: "loop/x", bad: true},
	} {
		t.Run(tc.rel, func(t *testing.T) {
			err := staysInside(dir, filepath.FromSlash(tc.rel))
			if tc.bad != errors.Is(err, ErrBadPath) || (!tc.bad && err != nil) {
				t.Fatalf("staysInside(%q) = %v, want bad=%v", tc.rel, err, tc.bad)
			}
		})
	}
}
