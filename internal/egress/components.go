package egress

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"time"
)

// componentResolveTimeout bounds resolving the components' host names at
// start-up.
const componentResolveTimeout = 10 * time.Second

// ComponentPrefixes resolves the hosts of store URLs
// (postgres://user@host:port/db, s3://bucket?endpoint=http://host:port)
// to /32s and /128s, for the ceiling to deny (Ceiling.WithComponents).
// Others (bolt, directories, S3 without an endpoint) name no address; a
// host that does not resolve (within componentResolveTimeout) is logged
// and left out, as HostPrefixes leaves it.
func ComponentPrefixes(ctx context.Context, log *slog.Logger, urls ...string) []netip.Prefix {
	ctx, cancel := context.WithTimeout(ctx, componentResolveTimeout)
	defer cancel()
	var hosts []string
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			continue
		}
		host := ""
		switch u.Scheme {
		case "postgres", "postgresql":
			host = u.Hostname()
		case "s3":
			if ep, err := url.Parse(u.Query().Get("endpoint")); err == nil {
				host = ep.Hostname()
			}
		}
		if host != "" {
			hosts = append(hosts, host)
		}
	}
	return HostPrefixes(ctx, log, "a component", hosts...)
}

// HostPrefixes resolves hosts — names or addresses, each with or without
// a port ("host:port", "[2001:db8::1]:port") — to /32s and /128s, each
// address once. A host that does not resolve is logged as what it is
// ("an API server replica", "a component") and adds nothing.
func HostPrefixes(ctx context.Context, log *slog.Logger, what string, hosts ...string) []netip.Prefix {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var out []netip.Prefix
	for _, host := range hosts {
		if h, _, err := net.SplitHostPort(host); err == nil {
			host = h
		}
		addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil {
			log.Warn("egress: cannot resolve "+what+" to deny it to sandboxes", "host", host, "err", err)
			continue
		}
		for _, a := range addrs {
			a = a.Unmap()
			if p := netip.PrefixFrom(a, a.BitLen()); !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}
