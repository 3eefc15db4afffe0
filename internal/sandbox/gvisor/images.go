package gvisor

// ImageOptions say how checkpoint images are written and read. The zero
// value is what a node uses.
type ImageOptions struct {
	// Compress flate-compresses the whole image into checkpoint.img.
	// Uncompressed, runsc keeps memory apart in a page-aligned pages.img
	// (with pages_meta.img), which a restore reads straight into the
	// sandbox's memory file and can load in the background.
	Compress bool
	// ExcludeZeroPages leaves committed pages that hold only zeroes out
	// of the image (runsc checkpoint --exclude-committed-zero-pages).
	ExcludeZeroPages bool
	// Background lets a restore return as soon as the sandbox's kernel
	// state is loaded, the pages (which runsc starts reading at once)
	// going on loading in the background (runsc restore --background): a
	// page the application touches before it has arrived waits for it, a
	// checkpoint waits for them all, and a read that fails after the
	// restore returned kills the sandbox. Without it a restore returns
	// once every page is in. No effect on a compressed image. Off by
	// default: it did not pay on 2 cores (BENCHMARKS.md, Restoring
	// interpreters).
	Background bool
}

// checkpointFlags are o's runsc checkpoint flags.
func (o ImageOptions) checkpointFlags() []string {
	flags := []string{"--compression=none"}
	if o.Compress {
		flags[0] = "--compression=flate-best-speed"
	}
	if o.ExcludeZeroPages {
		flags = append(flags, "--exclude-committed-zero-pages")
	}
	return flags
}

// restoreFlags are o's runsc restore flags.
func (o ImageOptions) restoreFlags() []string {
	if o.Background {
		return []string{"--background"}
	}
	return nil
}
