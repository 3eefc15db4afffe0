package bolt

import (
	"path/filepath"
	"testing"
	"time"

	"substrate.dev/ate/internal/store"
	"substrate.dev/ate/internal/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		s, err := Open(filepath.Join(t.TempDir(), "ate.db"), time.Second)
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
