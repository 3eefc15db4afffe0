package up

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"substrate.dev/ate/internal/store/bolt"
)

// TestNewControlPlaneFailureClosesCleanly: a build that fails part-way
// returns its error and releases what it built (the store's file lock),
// rather than closing a nil control plane.
func TestNewControlPlaneFailureClosesCleanly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mkdir  bool   // create block as a directory (else as a file)
		block  string // path in the data dir that makes the build fail
		opened bool   // the store was opened before the failure
	}{
		{"store cannot open", true, DBName, false},
		{"snapshots cannot open", false, "snapshots", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, tc.block)
			var err error
			if tc.mkdir {
				err = os.Mkdir(p, 0o700)
			} else {
				err = os.WriteFile(p, nil, 0o600)
			}
			if err != nil {
				t.Fatal(err)
			}
			cp, err := NewControlPlane(context.Background(), context.Background(), ControlPlaneConfig{DataDir: dir})
			if err == nil || cp != nil {
				t.Fatalf("NewControlPlane = %v, %v; want an error", cp, err)
			}
			if !tc.opened {
				return
			}
			st, err := bolt.Open(filepath.Join(dir, DBName), 100*time.Millisecond)
			if err != nil {
				t.Fatalf("store still locked after the failed build: %v", err)
			}
			_ = st.Close()
		})
	}
}
