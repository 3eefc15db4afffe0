package snapshot

import (
	"io/fs"
	"path/filepath"
)

// Bytes is the total size of m's files (uncompressed).
func (m *Manifest) Bytes() int64 {
	var n int64
	for _, f := range m.Files {
		n += f.Size
	}
	return n
}

// TreeSize is the total size of the regular files under dir, 0 where it
// cannot be read (it is for metrics, which would rather undercount than
// fail a checkpoint).
func TreeSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	})
	return n
}
