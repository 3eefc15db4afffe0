package up

import (
	"fmt"

	"substrate.dev/ate/internal/httpserve"
	"substrate.dev/ate/internal/metrics"
)

// newManagementServer listens on addr for ms's metrics (and the Go
// runtime's) and pprof, /healthz and /readyz (httpserve.NewManagement).
func newManagementServer(addr string, ms *metrics.Metrics, ready func() error) (*httpserve.Management, error) {
	reg, err := metrics.NewRegistry(ms)
	if err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	return httpserve.NewManagement(addr, reg, ready)
}
