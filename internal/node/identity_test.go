package node

import (
	"os"
	"path/filepath"
	"testing"
)

func TestIdentityFilesWrite(t *testing.T) {
	dir := t.TempDir()
	// A previous process left longer content behind: the first write
	// must not keep its tail.
	for _, name := range identityNames {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("left-over-from-before"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var f identityFiles
	defer f.close()
	steps := []struct {
		name string
		id   [3]string
	}{
		{"first write over stale files", [3]string{"a", "default", "uid-1"}},
		{"same lengths, other values", [3]string{"b", "default", "uid-2"}},
		{"longer values", [3]string{"much-longer-name", "other-space", "uid-333333"}},
		{"shorter values", [3]string{"c", "x", "u"}},
	}
	for _, st := range steps {
		if err := f.write(dir, st.id); err != nil {
			t.Fatalf("%s: %v", st.name, err)
		}
		for i, name := range identityNames {
			got, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil || string(got) != st.id[i] {
				t.Fatalf("%s: %s = %q (%v), want %q", st.name, name, got, err, st.id[i])
			}
		}
	}
	// An unchanged identity writes nothing (an actor returning to its
	// worker costs nothing), so content changed behind the files' back
	// stays.
	if err := os.WriteFile(filepath.Join(dir, "atespace"), []byte("behind"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.write(dir, [3]string{"c", "x", "u"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "atespace")); string(got) != "behind" {
		t.Fatalf("atespace after an unchanged write = %q, want it untouched (behind)", got)
	}
	// After close the files are opened again and, their content being
	// unknown, rewritten whole.
	if err := f.close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "atespace"), []byte("changed-behind-our-back"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.write(dir, [3]string{"c", "x", "u"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "atespace")); string(got) != "x" {
		t.Fatalf("atespace after reopen = %q, want x", got)
	}
}
