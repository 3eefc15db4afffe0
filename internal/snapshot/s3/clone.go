package s3

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/minio/minio-go/v7"
	"golang.org/x/sync/errgroup"

	"substrate.dev/ate/internal/codec"
	"substrate.dev/ate/internal/snapshot"
)

// maxCopyObject is the largest object one server-side CopyObject may
// copy (S3's limit, 5 GiB); larger ones are copied by ComposeObject,
// which copies them in parts, still server-side.
const maxCopyObject = 5 << 30

// Clone implements snapshot.Store: every object of src is copied to the
// new snapshot's prefix by the object storage itself (CopyObject, or
// ComposeObject above 5 GiB), so no snapshot bytes pass through this
// process; then the new manifest (src's, with the new Ref and time) is
// uploaded last. The local cache is not filled: the first Open of the
// clone downloads it, as on any other node. On error the objects copied
// so far are removed as far as possible (the rest are an incomplete ref
// for garbage collection).
func (s *Store) Clone(ctx context.Context, src, owner, id string) (string, error) {
	bare, _, err := snapshot.ParseRef(src)
	if err != nil {
		return "", err
	}
	id, err = snapshot.StageID(owner, id)
	if err != nil {
		return "", err
	}
	// getManifest checks src's digest: a clone (tag, fork) must not
	// launder a substituted snapshot under a fresh digest of its own.
	srcBase := s.root() + bare + "/"
	m, _, err := s.getManifest(ctx, src, srcBase)
	if err != nil {
		return "", err
	}
	ref := owner + "/" + id
	base := s.root() + ref + "/"
	data, err := s.copyAll(ctx, srcBase, base, m)
	if err != nil {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		if rerr := s.removePrefix(cctx, base); rerr != nil {
			s.log.Warn("removing objects of a failed clone", "ref", ref, "err", rerr)
		}
		return "", fmt.Errorf("clone snapshot %s to %s: %w", src, ref, err)
	}
	return snapshot.WithDigest(ref, data), nil
}

// copyAll copies m's file objects from under srcBase to under base, then
// puts m, renamed to base's ref, as the manifest, whose bytes it returns.
func (s *Store) copyAll(ctx context.Context, srcBase, base string, m *snapshot.Manifest) ([]byte, error) {
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(fileParallelism)
	for _, f := range m.Files {
		g.Go(func() error {
			from := minio.CopySrcOptions{Bucket: s.cfg.Bucket, Object: objectKey(srcBase, f)}
			to := minio.CopyDestOptions{Bucket: s.cfg.Bucket, Object: objectKey(base, f)}
			var err error
			if f.StoredSize >= maxCopyObject {
				_, err = s.client.ComposeObject(gctx, to, from)
			} else {
				_, err = s.client.CopyObject(gctx, to, from)
			}
			if err != nil {
				return fmt.Errorf("copy %s: %w", from.Object, err)
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	out := *m
	out.Ref = strings.TrimSuffix(strings.TrimPrefix(base, s.root()), "/")
	out.CreateTime = time.Now().UTC()
	data, err := codec.MarshalIndent(&out, "", "  ")
	if err != nil {
		return nil, err
	}
	key := base + snapshot.ManifestName
	if _, err := s.client.PutObject(ctx, s.cfg.Bucket, key, strings.NewReader(string(data)), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/json"}); err != nil {
		return nil, fmt.Errorf("upload %s: %w", key, err)
	}
	return data, nil
}
