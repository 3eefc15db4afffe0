package loadgen

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"substrate.dev/ate/internal/testwait"
)

func TestRun(t *testing.T) {
	ok := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Test") != "1" {
			http.Error(w, "missing header", http.StatusBadRequest)
			return
		}
		_, _ = w.Write([]byte("count=1\n"))
	}))
	defer ok.Close()
	addr := strings.TrimPrefix(ok.URL, "http://")
	dial := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
	for _, tc := range []struct {
		name    string
		headers []string
		rate    float64
		// min and max requests expected in the run; wantErr: an error.
		min, max int
		wantErr  string
	}{
		{"closed loop", []string{"X-Test: 1"}, 0, 10, 1 << 30, ""},
		{"paced", []string{"X-Test: 1"}, 200, 20, 60, ""},
		{"not 200 stops the run", nil, 0, 0, 0, "response 400"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), Config{
				Dial: dial, Request: NewRequest(addr, "/", tc.headers...), Conns: 4, Duration: 200 * time.Millisecond, Rate: tc.rate,
			})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests < tc.min || res.Requests > tc.max || len(res.Latencies) != res.Requests {
				t.Errorf("%d requests, %d latencies, want %d..%d requests, one latency each", res.Requests, len(res.Latencies), tc.min, tc.max)
			}
			if res.PerSecond() <= 0 {
				t.Errorf("PerSecond = %g", res.PerSecond())
			}
		})
	}
}

func TestPinAndCPUTime(t *testing.T) {
	var mine unix.CPUSet
	if err := unix.SchedGetaffinity(0, &mine); err != nil {
		t.Fatal(err)
	}
	cpu := -1
	for c := range 1024 {
		if mine.IsSet(c) {
			cpu = c
			break
		}
	}
	restore, err := Pin(os.Getpid(), cpu)
	if err != nil {
		t.Fatal(err)
	}
	var now unix.CPUSet
	if err := unix.SchedGetaffinity(0, &now); err != nil {
		t.Fatal(err)
	}
	restore()
	if now.Count() != 1 || !now.IsSet(cpu) {
		t.Errorf("pinned affinity has %d CPUs, want only CPU %d", now.Count(), cpu)
	}
	var after unix.CPUSet
	if err := unix.SchedGetaffinity(0, &after); err != nil {
		t.Fatal(err)
	}
	if after != mine {
		t.Errorf("affinity after restore differs from before")
	}
	before, err := CPUTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// Spin until the count (in 10 ms ticks) moves.
	testwait.Until(t, "CPU time to grow while spinning", func() bool {
		for end := time.Now().Add(5 * time.Millisecond); time.Now().Before(end); {
		}
		used, err := CPUTime(os.Getpid())
		return err == nil && used > before
	})
	if _, err := Pin(1<<30, cpu); err == nil {
		t.Error("Pin of a process that does not exist succeeded")
	}
}
