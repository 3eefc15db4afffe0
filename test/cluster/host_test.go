package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"

	"substrate.dev/ate/internal/snapshot/s3/s3test"
	"substrate.dev/ate/internal/store/postgres/pgtest"
)

// hostServices are the stores the chart is pointed at: a PostgreSQL
// server (Debian's, pgtest) and a SeaweedFS S3 gateway (s3test), both
// processes on the host, as an operator's managed database and object
// store would be outside the cluster. They listen on loopback; a TCP
// forwarder on the host's address (which Pods reach through the CNI
// bridge's masquerade) makes each reachable from Pods.
type hostServices struct {
	pg        *pgtest.Server
	s3        *s3test.Server
	fwds      []net.Listener
	wg        sync.WaitGroup
	storeURL  string // postgres://… for Pods
	snapsURL  string // s3://… for Pods
	accessKey string
	secretKey string
}

func startHostServices(ctx context.Context, dir string, hostIP net.IP) (*hostServices, error) {
	h := &hostServices{}
	var err error
	if h.pg, err = pgtest.StartLocal(ctx); err != nil {
		return nil, err
	}
	s3dir := filepath.Join(dir, "s3")
	if err := os.MkdirAll(s3dir, 0o755); err != nil {
		h.stop()
		return nil, err
	}
	if h.s3, err = s3test.Start(ctx, s3dir); err != nil {
		h.stop()
		return nil, err
	}
	pgAddr, err := h.forward(hostIP, h.pg.Addr())
	if err != nil {
		h.stop()
		return nil, err
	}
	u, _ := url.Parse(h.pg.URL("postgres"))
	u.Host = pgAddr
	h.storeURL = u.String()
	s3Addr, err := h.forward(hostIP, h.s3.Endpoint)
	if err != nil {
		h.stop()
		return nil, err
	}
	h.snapsURL = fmt.Sprintf("s3://%s/cluster?endpoint=http://%s&region=us-east-1", h.s3.Bucket, s3Addr)
	h.accessKey, h.secretKey = h.s3.AccessKey, h.s3.SecretKey
	return h, nil
}

// forward accepts on hostIP (a free port) and copies each connection to
// and from target; it returns the address it listens on.
func (h *hostServices) forward(hostIP net.IP, target string) (string, error) {
	l, err := net.Listen("tcp4", net.JoinHostPort(hostIP.String(), "0"))
	if err != nil {
		return "", err
	}
	h.fwds = append(h.fwds, l)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return l.Addr().String(), nil
}

func (h *hostServices) stop() {
	for _, l := range h.fwds {
		l.Close()
	}
	h.wg.Wait()
	if h.s3 != nil {
		_ = h.s3.Close()
	}
	if h.pg != nil {
		_ = h.pg.Stop()
	}
}
