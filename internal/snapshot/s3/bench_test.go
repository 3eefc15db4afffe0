package s3_test

import (
	"context"
	"crypto/rand"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/s3"
)

// BenchmarkTransfer measures Commit (upload) and Open with a cold cache
// (download, decompress, verify) against the test binary's SeaweedFS on
// loopback, in MB/s of uncompressed checkpoint, with and without zstd;
// stored-ratio is stored bytes / checkpoint bytes.
//
// The checkpoint is ATE_S3_BENCH_CHECKPOINT (a snapshot directory runsc
// wrote: checkpoint.img, pages.img, pages_meta.img) if set, else a
// synthetic one shaped like those: 64 MiB of pages, each with a run of
// ~700 random bytes among zeros (a real pages.img here compresses to
// ~18% with gzip -1; runsc already leaves out all-zero pages), a 200 KiB
// half-random checkpoint.img and a small pages_meta.img.
func BenchmarkTransfer(b *testing.B) {
	files := benchCheckpoint(b)
	var total int64
	for _, d := range files {
		total += int64(len(d))
	}
	for _, comp := range []string{s3.CompressionZstd, s3.CompressionNone} {
		b.Run("compression="+comp+"/op=commit", func(b *testing.B) {
			cfg := config(b, testPrefix(b))
			cfg.Compression, cfg.PartSize = comp, s3.DefaultPartSize
			cfg.CacheBytes = 1 // nothing stays cached: the disk stays small
			s := newStore(b, cfg)
			ctx := context.Background()
			b.SetBytes(total)
			var stored int64
			for b.Loop() {
				b.StopTimer()
				st := stage(b, s, "bench", files)
				b.StartTimer()
				ref, err := s.Commit(ctx, st, snapshot.ScopeFull)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				stored = storedBytes(b, s, ref)
				if err := s.Delete(ctx, ref); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(stored)/float64(total), "stored-ratio")
		})
		b.Run("compression="+comp+"/op=open-cached", func(b *testing.B) {
			s := newStore(b, config(b, testPrefix(b)))
			ctx := context.Background()
			ref := commit(b, s, "bench", files)
			for b.Loop() {
				o, err := s.Open(ctx, ref)
				if err != nil {
					b.Fatal(err)
				}
				o.Close()
			}
		})
		b.Run("compression="+comp+"/op=open-cold", func(b *testing.B) {
			cfg := config(b, testPrefix(b))
			cfg.Compression, cfg.PartSize = comp, s3.DefaultPartSize
			cfg.CacheBytes = 1 // every Close evicts, so every Open downloads
			s := newStore(b, cfg)
			ctx := context.Background()
			ref := commit(b, s, "bench", files)
			b.SetBytes(total)
			for b.Loop() {
				o, err := s.Open(ctx, ref)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				o.Close()
				b.StartTimer()
			}
		})
	}
}

// storedBytes opens ref's manifest (from S3: the cache holds nothing) and
// sums the stored sizes.
func storedBytes(b *testing.B, s *s3.Store, ref string) int64 {
	o, err := s.Open(context.Background(), ref)
	if err != nil {
		b.Fatal(err)
	}
	defer o.Close()
	var n int64
	for _, f := range o.Manifest.Files {
		n += f.StoredSize
	}
	return n
}

func benchCheckpoint(b *testing.B) map[string][]byte {
	if dir := os.Getenv("ATE_S3_BENCH_CHECKPOINT"); dir != "" {
		files := map[string][]byte{}
		for _, name := range []string{"checkpoint.img", "pages.img", "pages_meta.img"} {
			data, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				b.Fatal(err)
			}
			files[name] = data
		}
		return files
	}
	r := mrand.New(mrand.NewPCG(1, 2))
	pages := make([]byte, 64<<20)
	for off := 0; off < len(pages); off += 4096 {
		n := 200 + r.IntN(1000)
		start := off + r.IntN(4096-n)
		_, _ = rand.Read(pages[start : start+n])
	}
	img := make([]byte, 200<<10)
	_, _ = rand.Read(img[:len(img)/2])
	meta := make([]byte, 3<<10)
	for i := range meta {
		meta[i] = byte(r.IntN(16))
	}
	return map[string][]byte{"pages.img": pages, "checkpoint.img": img, "pages_meta.img": meta}
}
