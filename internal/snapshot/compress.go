package snapshot

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// CompressionZstd is File.Compression for a file kept zstd-compressed,
// under its name with ZstdSuffix appended (Local's file, the S3 store's
// object key).
const CompressionZstd = "zstd"

// ZstdSuffix ends the stored name of a zstd-compressed file.
const ZstdSuffix = ".zst"

// Bounds of the files a compressing Local compresses (LocalOptions).
// A counter's checkpoint is a 1.3 MB page file and a 0.2 MB state file,
// which zstd shrinks ~5× (1.5 MB → 0.3 MB) for ~8 ms of CPU at
// checkpoint and ~4 ms at restore (BenchmarkLocalCompression);
// a page file of hundreds of MB (an interpreter's live state) would cost
// a second to compress and a quarter of one to inflate before every restore, which
// the activation targets cannot pay, so larger files stay as they are.
// Below minCompressBytes a file's blocks are not worth a second inode.
const (
	minCompressBytes = 4 << 10
	maxCompressBytes = 16 << 20
)

// keepRatio: a file is kept compressed only when that saves at least a
// tenth of it; otherwise every restore would inflate it for nothing.
const keepRatio = 0.9

// LocalOptions configures NewLocalWith.
type LocalOptions struct {
	// Compress keeps each snapshot file of 4 KiB to 16 MiB zstd-compressed
	// at rest (name + ZstdSuffix, recorded in the manifest) when that
	// saves a tenth of it; Open then inflates them into a scratch
	// directory. For the durable snapshot store, where most actors of a
	// dense node sleep; a node's paused store, read back within minutes,
	// does not pay for it.
	Compress bool
}

// codecs are a Local's zstd encoder and decoder, both safe for concurrent
// use through EncodeAll/DecodeAll; nil for a Local that never compresses
// (it still reads compressed snapshots: the decoder is then made on
// first use by Open).
type codecs struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

func newCodecs(compress bool) (*codecs, error) {
	// Concurrent restores and checkpoints each take a decoder or encoder
	// of their own, up to GOMAXPROCS (the package's default): with one,
	// DecodeAll and EncodeAll calls would queue behind each other.
	dec, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	c := &codecs{dec: dec}
	if compress {
		// SpeedFastest: on a counter's page file zstd's level 1 is
		// within 1% of level 3's size (241.5 against 240.1 KB of 1.37
		// MB), at less CPU on the suspend path. A 1 MiB window
		// (8 MiB by default, allocated per encoder) loses nothing on
		// them either.
		if c.enc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(1<<20)); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// compressFile replaces the staged file p (size bytes) by p+ZstdSuffix,
// fsynced, when l compresses and it pays; it returns the manifest entry
// fields (compression, stored size) and whether it did. A file whose
// compressed name is already taken (a volume may hold "x" and "x.zst")
// stays as it is.
func (l *Local) compressFile(p string, size int64) (string, int64, bool, error) {
	if l.codecs.enc == nil || size < minCompressBytes || size > maxCompressBytes {
		return "", 0, false, nil
	}
	if _, err := os.Lstat(p + ZstdSuffix); !errors.Is(err, fs.ErrNotExist) {
		return "", 0, false, nil
	}
	data, err := os.ReadFile(p)
	if err != nil {
		return "", 0, false, err
	}
	if int64(len(data)) != size {
		return "", 0, false, fmt.Errorf("%s changed size while committed", p)
	}
	z := l.codecs.enc.EncodeAll(data, make([]byte, 0, len(data)/2))
	if float64(len(z)) > keepRatio*float64(size) {
		return "", 0, false, nil
	}
	info, err := os.Stat(p)
	if err != nil {
		return "", 0, false, err
	}
	if err := writeFileSyncMode(p+ZstdSuffix, z, info.Mode().Perm()); err != nil {
		return "", 0, false, err
	}
	if err := os.Remove(p); err != nil {
		return "", 0, false, err
	}
	return CompressionZstd, int64(len(z)), true, nil
}

// hasCompressed reports whether any of m's files is kept compressed.
func (m *Manifest) hasCompressed() bool {
	for _, f := range m.Files {
		if f.Compression != "" {
			return true
		}
	}
	return false
}

// inflate makes a scratch directory under l's .open holding snapshot dir
// (manifest m) as its readers expect it: compressed files inflated under
// their own names, every other file hard-linked (no bytes copied),
// directories and symlinks recreated. The caller removes it. Scratch
// files are never fsynced: they are a cache of the durable snapshot.
// A file that does not inflate to its recorded size wraps ErrCorrupt.
func (l *Local) inflate(dir, ref string, m *Manifest) (string, error) {
	var b [8]byte
	_, _ = rand.Read(b[:])
	scratch := filepath.Join(l.dir, ".open", hex.EncodeToString(b[:]))
	if err := os.MkdirAll(scratch, 0o700); err != nil {
		return "", err
	}
	stored := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		if f.Compression != "" {
			stored[f.Name+ZstdSuffix] = f
		}
	}
	// linkTree recreates the tree and links every file but the
	// compressed ones, which are inflated into it afterwards.
	err := linkTree(scratch, dir, func(rel string) bool { _, ok := stored[rel]; return ok })
	for name, f := range stored {
		if err != nil {
			break
		}
		err = l.inflateFile(filepath.Join(scratch, filepath.FromSlash(f.Name)), filepath.Join(dir, filepath.FromSlash(name)), ref, f)
	}
	if err != nil {
		_ = os.RemoveAll(scratch)
		return "", err
	}
	return scratch, nil
}

// inflateFile writes the decompressed content of src (f's stored file)
// to dst with f's mode.
func (l *Local) inflateFile(dst, src, ref string, f File) error {
	if f.Compression != CompressionZstd {
		return fmt.Errorf("%w: %s: file %s: unknown compression %q", ErrCorrupt, ref, f.Name, f.Compression)
	}
	z, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	data, err := l.codecs.dec.DecodeAll(z, make([]byte, 0, f.Size))
	if err != nil || int64(len(data)) != f.Size {
		return fmt.Errorf("%w: %s: file %s does not inflate to %d bytes: %v", ErrCorrupt, ref, f.Name, f.Size, err)
	}
	info, err := os.Stat(src)
	if err != nil {
		return err
	}
	return os.WriteFile(dst, data, info.Mode().Perm())
}

// storedName is where f is kept in its snapshot's directory.
func (f File) storedName() string {
	if f.Compression != "" {
		return f.Name + ZstdSuffix
	}
	return f.Name
}

// storedSize is f's length in its snapshot's directory.
func (f File) storedSize() int64 {
	if f.Compression != "" {
		return f.StoredSize
	}
	return f.Size
}
