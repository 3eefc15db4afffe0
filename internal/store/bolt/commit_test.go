package bolt

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	bbolt "go.etcd.io/bbolt"
)

// TestCommitterKeepsSerialSemantics: many concurrent writes, some of which
// fail on the state the earlier ones left, each get the result a one-by-
// one execution gives, and exactly the successful ones are durable.
func TestCommitterKeepsSerialSemantics(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ate.db")
	s, err := Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	bucket, key := bMeta, []byte("counter")
	read := func(tx *bbolt.Tx) int {
		n, _ := strconv.Atoi(string(tx.Bucket(bucket).Get(key)))
		return n
	}
	refused := errors.New("refused")
	const writers = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, failed := 0, 0
	for i := range writers {
		wg.Go(func() {
			err := s.update(func(tx *bbolt.Tx) error {
				n := read(tx)
				// Refuse on every fifth value: whether a write fails
				// depends on those committed before it.
				if n%5 == 4 && i%2 == 0 {
					return fmt.Errorf("at %d: %w", n, refused)
				}
				return tx.Bucket(bucket).Put(key, []byte(strconv.Itoa(n+1)))
			})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, refused):
				failed++
			default:
				t.Errorf("write: %v", err)
			}
		})
	}
	wg.Wait()
	if ok+failed != writers {
		t.Fatalf("ok %d + failed %d != %d writers", ok, failed, writers)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.update(func(*bbolt.Tx) error { return nil }); !errors.Is(err, errClosed) {
		t.Fatalf("write after Close = %v, want errClosed", err)
	}
	s, err = Open(path, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got int
	if err := s.db.View(func(tx *bbolt.Tx) error { got = read(tx); return nil }); err != nil {
		t.Fatal(err)
	}
	if got != ok {
		t.Fatalf("durable counter = %d, want %d successful writes (%d refused)", got, ok, failed)
	}
}
