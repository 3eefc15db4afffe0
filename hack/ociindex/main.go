// Command ociindex assembles single-image OCI layouts, one per platform
// (as hack/ocipack writes them with --arch), into one OCI image layout
// holding a multi-platform image index:
//
//	go run ./hack/ociindex --tag latest --out build/images/ate \
//	    build/tmp/ate-amd64 build/tmp/ate-arm64
//
// Each input's platform comes from its image config. The output is
// deterministic (same inputs, same index digest). The work is
// image.PackIndex; this only parses flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"substrate.dev/ate/internal/image"
)

func main() {
	var o image.IndexOptions
	fs := flag.NewFlagSet("ociindex", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: ociindex --out DIR [--tag TAG] LAYOUT...")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Out, "out", "", "OCI layout directory to write (replaced)")
	fs.StringVar(&o.Tag, "tag", "latest", "tag of the index (org.opencontainers.image.ref.name)")
	err := fs.Parse(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		os.Exit(2)
	}
	o.Layouts = fs.Args()
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := image.PackIndex(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "ociindex:", err)
		os.Exit(1)
	}
}
