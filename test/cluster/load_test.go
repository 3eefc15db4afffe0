package cluster

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// load sends rate requests a second, round-robin over actors, through the
// router Service until stop is called, and records each failure: the
// client of the rolling-update stories.
type load struct {
	mu       sync.Mutex
	sent, ok int
	failures []string
	stop     context.CancelFunc
	done     chan struct{}
}

func startLoad(ctx context.Context, rate int, actors []string) (*load, error) {
	u, err := routerURL(ctx)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &load{stop: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 30 * time.Second}
	go func() {
		defer close(l.done)
		var wg sync.WaitGroup
		defer wg.Wait()
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			actor := actors[i%len(actors)]
			wg.Add(1)
			go func() {
				defer wg.Done()
				// Not bound to ctx: a request already sent is awaited.
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				req.Header.Set("ate-target-actor", actor)
				start := time.Now()
				resp, err := client.Do(req)
				l.mu.Lock()
				defer l.mu.Unlock()
				l.sent++
				if err != nil {
					l.failures = append(l.failures, fmt.Sprintf("%s %s: %v", start.Format("15:04:05.000"), actor, err))
					return
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					l.failures = append(l.failures, fmt.Sprintf("%s %s: %s (request id %s)", start.Format("15:04:05.000"), actor, resp.Status, resp.Header.Get("X-Request-Id")))
					return
				}
				l.ok++
			}()
		}
	}()
	return l, nil
}

// finish stops the load and returns what it saw.
func (l *load) finish() (sent, ok int, failures []string) {
	l.stop()
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.sent, l.ok, l.failures
}

func summary(failures []string) string {
	if len(failures) > 20 {
		failures = append(failures[:20:20], fmt.Sprintf("… %d more", len(failures)-20))
	}
	return strings.Join(failures, "\n")
}
