package gvisor

import (
	"slices"
	"testing"
)

// TestImageOptionsFlags: the runsc flags the command path passes for each
// image option, which the library path must match (library.go).
func TestImageOptionsFlags(t *testing.T) {
	for _, tc := range []struct {
		name                string
		img                 ImageOptions
		checkpoint, restore []string
	}{
		{"default", ImageOptions{}, []string{"--compression=none"}, nil},
		{"compressed", ImageOptions{Compress: true}, []string{"--compression=flate-best-speed"}, nil},
		{"zero pages excluded", ImageOptions{ExcludeZeroPages: true}, []string{"--compression=none", "--exclude-committed-zero-pages"}, nil},
		{"background", ImageOptions{Background: true}, []string{"--compression=none"}, []string{"--background"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.img.checkpointFlags(); !slices.Equal(got, tc.checkpoint) {
				t.Errorf("checkpointFlags = %q, want %q", got, tc.checkpoint)
			}
			if got := tc.img.restoreFlags(); !slices.Equal(got, tc.restore) {
				t.Errorf("restoreFlags = %q, want %q", got, tc.restore)
			}
			l := library{img: tc.img}
			opts := l.checkpointOpts("c", false)
			if want := tc.checkpoint[0][len("--compression="):]; string(opts.Compression) != want {
				t.Errorf("library compression = %q, want %q", opts.Compression, want)
			}
			if opts.ExcludeCommittedZeroPages != tc.img.ExcludeZeroPages || opts.Direct {
				t.Errorf("library checkpoint options = %+v", opts)
			}
		})
	}
}
