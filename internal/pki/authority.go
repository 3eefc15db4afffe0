package pki

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"time"

	"substrate.dev/ate/internal/auth"
)

// Authority is `ate up`'s CA: kept in <data-dir>/pki (created on first
// start, key 0600), it issues every in-process component's leaf in
// memory (MemorySource), renewed before expiry.
type Authority struct {
	CA          *CA
	Dir         string
	TrustDomain string
	// LeafTTL is the life of the leaves issued (DefaultLeafTTL if 0).
	LeafTTL time.Duration
}

// OpenAuthority opens or creates the CA in dir (InitCA).
func OpenAuthority(dir, trustDomain string, leafTTL time.Duration) (*Authority, error) {
	if trustDomain == "" {
		trustDomain = auth.DefaultTrustDomain
	}
	ca, _, err := InitCA(dir, trustDomain)
	if err != nil {
		return nil, fmt.Errorf("in-process CA: %w", err)
	}
	return &Authority{CA: ca, Dir: dir, TrustDomain: trustDomain, LeafTTL: leafTTL}, nil
}

// CAFile is the path of the CA's certificate, for clients to trust.
func (a *Authority) CAFile() string { return filepath.Join(a.Dir, CAFile) }

// Transport issues id's leaf (with SANs for loopback and hosts, which
// may be host names or IP addresses) and returns the Transport serving
// and dialling with it, and its source (to watch rotations); the source
// renews the leaf until ctx ends (MemorySource.Run).
func (a *Authority) Transport(ctx context.Context, id auth.Identity, hosts ...string) (*Transport, *MemorySource, error) {
	req := LeafRequest{Identity: id, TrustDomain: a.TrustDomain, TTL: a.LeafTTL, DNS: []string{"localhost"},
		IPs: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			req.IPs = append(req.IPs, ip)
		} else if h != "" {
			req.DNS = append(req.DNS, h)
		}
	}
	src, err := NewMemorySource(a.CA, req)
	if err != nil {
		return nil, nil, err
	}
	go src.Run(ctx)
	return &Transport{Source: src, TrustDomain: a.TrustDomain}, src, nil
}
