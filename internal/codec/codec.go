// Package codec is how Substrate encodes the JSON it keeps on disk: the
// record store's records (internal/store/bolt), snapshot manifests and the
// fake sandbox's state. It is encoding/json's API and behaviour; which
// implementation does the work is chosen here, once.
//
// The implementation is github.com/goccy/go-json, a drop-in for
// encoding/json that decodes several times faster. Why it is worth a
// dependency was measured, with BenchmarkWakeups, in BENCHMARKS.md,
// "Control plane (fake sandbox)" → "Wake-up throughput" (the go-json
// steps for store records, then for snapshot manifests and the fake's
// state). To go back to the standard library, import encoding/json as
// impl instead and run that benchmark again.
package codec

import impl "github.com/goccy/go-json"

// Marshal is json.Marshal.
func Marshal(v any) ([]byte, error) { return impl.Marshal(v) }

// MarshalIndent is json.MarshalIndent.
func MarshalIndent(v any, prefix, indent string) ([]byte, error) {
	return impl.MarshalIndent(v, prefix, indent)
}

// Unmarshal is json.Unmarshal.
func Unmarshal(data []byte, v any) error { return impl.Unmarshal(data, v) }
