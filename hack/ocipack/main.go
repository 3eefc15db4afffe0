// Command ocipack builds a single-layer OCI image layout from host files,
// without a container engine:
//
//	go run ./hack/ocipack --add build/tmp/counter:/counter --entrypoint /counter \
//	    --env PORT=8080 --workdir / --port 8080 --compression gzip --tag latest \
//	    --out build/images/counter
//
// --add, --entrypoint, --cmd, --env and --port repeat; each --entrypoint and
// --cmd is one argv element. The work is image.Pack; this only parses flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"substrate.dev/ate/internal/image"
)

func main() {
	opts, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ocipack:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := image.Pack(ctx, opts); err != nil {
		fmt.Fprintln(os.Stderr, "ocipack:", err)
		os.Exit(1)
	}
}

// parseFlags turns the command line into PackOptions.
func parseFlags(args []string) (image.PackOptions, error) {
	var (
		o           image.PackOptions
		compression string
		verbose     bool
	)
	fs := flag.NewFlagSet("ocipack", flag.ContinueOnError)
	fs.Func("add", "SRC:DEST: put host file or directory SRC at DEST in the image (repeatable; DEST defaults to /)", func(v string) error {
		src, dest, _ := strings.Cut(v, ":")
		if src == "" {
			return errors.New("want SRC:DEST")
		}
		o.Sources = append(o.Sources, image.PackSource{Src: src, Dest: dest})
		return nil
	})
	fs.Func("entrypoint", "one entrypoint argv element (repeatable)", appendTo(&o.Entrypoint))
	fs.Func("cmd", "one cmd argv element (repeatable)", appendTo(&o.Cmd))
	fs.Func("env", "KEY=VALUE (repeatable)", appendTo(&o.Env))
	fs.Func("port", "exposed TCP port (repeatable)", func(v string) error {
		p, err := strconv.Atoi(strings.TrimSuffix(v, "/tcp"))
		if err != nil {
			return fmt.Errorf("port %q: %w", v, err)
		}
		o.ExposedPorts = append(o.ExposedPorts, p)
		return nil
	})
	fs.StringVar(&o.WorkingDir, "workdir", "", "working directory of the image")
	fs.StringVar(&compression, "compression", string(image.CompressionGzip), "layer compression: gzip or none")
	fs.StringVar(&o.Tag, "tag", "latest", "tag (org.opencontainers.image.ref.name)")
	fs.StringVar(&o.Out, "out", "", "OCI layout directory to write (replaced)")
	fs.StringVar(&o.Architecture, "arch", "", "image architecture (default: this machine's)")
	fs.BoolVar(&o.KeepMTimes, "keep-mtimes", false, "store the sources' mtimes instead of a fixed epoch")
	fs.BoolVar(&verbose, "v", false, "debug logging")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	o.Compression = image.Compression(compression)
	level := slog.LevelInfo
	if verbose {
		level = slog.LevelDebug
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	return o, nil
}

func appendTo(dst *[]string) func(string) error {
	return func(v string) error {
		*dst = append(*dst, v)
		return nil
	}
}
