package snapshot_test

import (
	"testing"

	"substrate.dev/ate/internal/snapshot"
	"substrate.dev/ate/internal/snapshot/snapshottest"
)

func TestLocalConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store {
		l, err := snapshot.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

func TestLocalCompressedConformance(t *testing.T) {
	snapshottest.Run(t, func(t *testing.T) snapshot.Store {
		l, err := snapshot.NewLocalWith(t.TempDir(), snapshot.LocalOptions{Compress: true})
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
