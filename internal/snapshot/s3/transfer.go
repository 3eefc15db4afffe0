package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
	"github.com/minio/minio-go/v7"

	"substrate.dev/ate/internal/snapshot"
)

// partThreads is how many parts of one large upload are in flight at
// once; each holds a PartSize buffer. Two keep both cores of the
// benchmark VM busy (one compressing, one sending) without the memory of
// minio-go's default of four; files upload in parallel on top of it.
const partThreads = 2

// fileParallelism is how many files of one snapshot transfer at once: a
// checkpoint has three files (one large) plus one per volume file, so
// small volume files do not wait behind each other's round trips.
const fileParallelism = 4

// dataObject returns the options of a file's single-PUT upload. Its payload
// is not hashed into the request signature (DisableContentSha256, sent
// as UNSIGNED-PAYLOAD): the manifest's SHA-256 of every file, checked by
// every Open, already covers the bytes end to end, and skipping the
// second hash makes Commit 10-20% faster on the benchmark VM. The
// manifest itself is uploaded with a signed payload.
func dataObject() minio.PutObjectOptions {
	return minio.PutObjectOptions{ContentType: "application/octet-stream", DisableContentSha256: true}
}

// zstdSuffix ends the key of a zstd-compressed file's object.
const zstdSuffix = ".zst"

// objectKey is the key of file f under a snapshot's key prefix base.
func objectKey(base string, f snapshot.File) string {
	if f.Compression == CompressionZstd {
		return base + f.Name + zstdSuffix
	}
	return base + f.Name
}

// upload puts the file rel of dir as an object under base and returns its
// manifest entry: size and SHA-256 of the bytes read (uncompressed), and
// the stored size. The file is synced, since dir then enters the cache.
// A file that fits one part goes up in one PUT (compressed in memory), a
// larger one streams through zstd into a multipart upload.
func (s *Store) upload(ctx context.Context, base, dir, rel string, mode fs.FileMode) (snapshot.File, error) {
	f, err := os.Open(filepath.Join(dir, filepath.FromSlash(rel)))
	if err != nil {
		return snapshot.File{}, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return snapshot.File{}, err
	}
	out := snapshot.File{Name: rel, Mode: uint32(mode.Perm())}
	if s.cfg.Compression == CompressionZstd {
		out.Compression = CompressionZstd
	}
	key := objectKey(base, out)
	h := sha256.New()
	src := &countReader{r: io.TeeReader(f, h)}
	var stored int64
	if st.Size() <= int64(s.cfg.PartSize) {
		stored, err = s.putSmall(ctx, key, src, st.Size(), out.Compression != "")
	} else {
		stored, err = s.putLarge(ctx, key, src, out.Compression != "")
	}
	if err != nil {
		return snapshot.File{}, fmt.Errorf("upload %s: %w", key, err)
	}
	if err := f.Sync(); err != nil {
		return snapshot.File{}, err
	}
	out.Size, out.SHA256, out.StoredSize = src.n, hex.EncodeToString(h.Sum(nil)), stored
	return out, nil
}

func (s *Store) putSmall(ctx context.Context, key string, src io.Reader, size int64, compress bool) (int64, error) {
	buf := bytes.NewBuffer(make([]byte, 0, size))
	if _, err := io.Copy(buf, src); err != nil {
		return 0, err
	}
	data := buf.Bytes()
	if compress {
		data = s.enc.EncodeAll(data, make([]byte, 0, len(data)/2+64))
	}
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, bytes.NewReader(data), int64(len(data)),
		dataObject())
	return int64(len(data)), err
}

func (s *Store) putLarge(ctx context.Context, key string, src io.Reader, compress bool) (int64, error) {
	body := &countReader{r: src}
	var done chan error
	if compress {
		pr, pw := io.Pipe()
		done = make(chan error, 1)
		go func() {
			zw, err := zstd.NewWriter(pw, zstd.WithEncoderLevel(zstd.SpeedFastest))
			if err == nil {
				if _, err = io.Copy(zw, src); err == nil {
					err = zw.Close()
				} else {
					zw.Close()
				}
			}
			pw.CloseWithError(err)
			done <- err
		}()
		// Closing the read side unblocks the compressor if the upload
		// stops reading early; the wait makes sure it no longer reads
		// the file before upload closes it.
		defer func() { pr.Close(); <-done }()
		body.r = pr
	}
	_, err := s.client.PutObject(ctx, s.cfg.Bucket, key, body, -1, minio.PutObjectOptions{
		ContentType:           "application/octet-stream",
		DisableContentSha256:  true, // see dataObject
		PartSize:              s.cfg.PartSize,
		NumThreads:            partThreads,
		ConcurrentStreamParts: true,
	})
	return body.n, err
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// errRecorder remembers the last error its reader returned, to tell an
// object read failure (network, missing object) from a decoding one.
type errRecorder struct {
	r   io.Reader
	err error
}

func (e *errRecorder) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF {
		e.err = err
	}
	return n, err
}

// download fetches file f of snapshot ref into dir, decompressing and
// verifying its size and SHA-256 against the manifest. Bad bytes are an
// error wrapping snapshot.ErrCorrupt that names the object key (and both
// checksums or sizes); a failure to read the object is returned as is.
func (s *Store) download(ctx context.Context, ref, base, dir string, f snapshot.File) error {
	if !filepath.IsLocal(filepath.FromSlash(f.Name)) {
		return fmt.Errorf("%w: %s: manifest names file %q outside the snapshot", snapshot.ErrCorrupt, ref, f.Name)
	}
	key := objectKey(base, f)
	obj, err := s.client.GetObject(ctx, s.cfg.Bucket, key, minio.GetObjectOptions{})
	if err != nil {
		return fmt.Errorf("download %s: %w", key, err)
	}
	defer obj.Close()
	rec := &errRecorder{r: obj}
	var r io.Reader = rec
	switch f.Compression {
	case "":
	case CompressionZstd:
		// One goroutine: files already download in parallel, and a
		// synchronous decoder stops at the first corrupt block.
		dec, err := zstd.NewReader(rec, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return err
		}
		defer dec.Close()
		r = dec
	default:
		return fmt.Errorf("%w: %s: object %s: unknown compression %q", snapshot.ErrCorrupt, ref, key, f.Compression)
	}
	p := filepath.Join(dir, filepath.FromSlash(f.Name))
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	mode := fs.FileMode(f.Mode).Perm()
	if mode == 0 {
		mode = 0o600
	}
	out, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	h := sha256.New()
	// Reading one byte past the recorded size tells "longer" from "equal".
	n, err := io.Copy(io.MultiWriter(out, h), io.LimitReader(r, f.Size+1))
	if err == nil {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		if rec.err != nil {
			if minio.ToErrorResponse(rec.err).Code == "NoSuchKey" {
				return fmt.Errorf("%w: %s: object %s missing", snapshot.ErrCorrupt, ref, key)
			}
			return fmt.Errorf("download %s: %w", key, rec.err)
		}
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return err // the local disk, not the object
		}
		return fmt.Errorf("%w: %s: object %s does not decode (%v); manifest says sha256 %s", snapshot.ErrCorrupt, ref, key, err, f.SHA256)
	}
	if n != f.Size {
		return fmt.Errorf("%w: %s: object %s holds %s bytes, manifest says %d (sha256 %s)",
			snapshot.ErrCorrupt, ref, key, sizeString(n, f.Size), f.Size, f.SHA256)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.SHA256 {
		return fmt.Errorf("%w: %s: object %s: sha256 %s, manifest says %s", snapshot.ErrCorrupt, ref, key, got, f.SHA256)
	}
	return nil
}

// sizeString reports a read size; more than the limit means "at least".
func sizeString(n, want int64) string {
	if n > want {
		return fmt.Sprintf("more than %d", want)
	}
	return fmt.Sprint(n)
}
