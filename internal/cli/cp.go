package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/execio"
	"substrate.dev/ate/internal/names"
)

// actorPathPrefix marks the actor side of `ate cp`: actor/NAME:PATH or
// actor/ATESPACE/NAME:PATH. The kind prefix keeps a local file name with
// a colon in it from being taken for an actor.
const actorPathPrefix = "actor/"

func newCpCommand(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "cp SRC DST",
		Short: "Copy a file into or out of a running actor's durable volumes",
		Long: "Copy one regular file between this machine and a RUNNING actor's durable\n" +
			"volumes. The actor side is actor/NAME:PATH (or actor/ATESPACE/NAME:PATH),\n" +
			"PATH absolute inside the actor's container and under a volume's mount path;\n" +
			"paths elsewhere, with \"..\", or leading out through a symlink are refused.\n" +
			"LOCAL - is stdin or stdout; a LOCAL directory receives the file under its\n" +
			"own name. A file lands whole or not at all, at most 1 GiB. --timeout bounds\n" +
			"the whole copy.",
		Example: "  ate cp notes.txt actor/notes-1:/data/notes.txt\n" +
			"  ate cp actor/notes-1:/data/notes.txt ./backup/",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error { return a.cp(cmd, args[0], args[1]) },
	}
}

// actorPath parses actor/[ATESPACE/]NAME:PATH; ok is false for a local path.
func (a *app) actorPath(arg string) (key names.ActorKey, p string, ok bool, err error) {
	rest, ok := strings.CutPrefix(arg, actorPathPrefix)
	if !ok {
		return key, "", false, nil
	}
	name, p, found := strings.Cut(rest, ":")
	if !found || p == "" {
		return key, "", true, fmt.Errorf("%q: write the actor side as actor/NAME:PATH", arg)
	}
	key, err = a.actorKey(name)
	return key, p, true, err
}

func (a *app) cp(cmd *cobra.Command, src, dst string) error {
	srcKey, srcPath, srcActor, err := a.actorPath(src)
	if err != nil {
		return err
	}
	dstKey, dstPath, dstActor, err := a.actorPath(dst)
	if err != nil {
		return err
	}
	if srcActor == dstActor {
		return errors.New("one side of ate cp must be an actor (actor/NAME:PATH) and the other local")
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithTimeout(cmd.Context(), s.timeout)
	defer cancel()
	if dstActor {
		return a.cpIn(ctx, cmd, s, src, dstKey, dstPath)
	}
	return a.cpOut(ctx, cmd, s, srcKey, srcPath, dst)
}

func (a *app) cpIn(ctx context.Context, cmd *cobra.Command, s *session, local string, key names.ActorKey, p string) error {
	var in io.Reader = cmd.InOrStdin()
	mode := os.FileMode(0o644)
	if local != "-" {
		f, err := os.Open(local)
		if err != nil {
			return err
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			return err
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%s is not a regular file: ate cp copies one file", local)
		}
		in, mode = f, fi.Mode().Perm()
		if strings.HasSuffix(p, "/") {
			p = path.Join(p, filepath.Base(local))
		}
	}
	stream, err := s.client.CopyToActor(ctx)
	if err != nil {
		return s.apiError(ctx, err)
	}
	err = stream.Send(&atev1.CopyToActorRequest{Msg: &atev1.CopyToActorRequest_Target{Target: &atev1.CopyTarget{
		Atespace: key.Atespace, Name: key.Name, Path: p, Mode: uint32(mode)}}})
	if err == nil {
		err = execio.SendChunks(in, func(b []byte) error {
			return stream.Send(&atev1.CopyToActorRequest{Msg: &atev1.CopyToActorRequest_Data{Data: b}})
		})
	}
	if err != nil && !errors.Is(err, io.EOF) { // EOF: the server ended the call; CloseAndRecv has its status
		return fmt.Errorf("read %s: %w", local, err)
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return s.apiError(ctx, err)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %d bytes to actor %s:%s\n", resp.GetSize(), key, p)
	return nil
}

func (a *app) cpOut(ctx context.Context, cmd *cobra.Command, s *session, key names.ActorKey, p, local string) error {
	stream, err := s.client.CopyFromActor(ctx, &atev1.CopyFromActorRequest{Target: &atev1.CopyTarget{
		Atespace: key.Atespace, Name: key.Name, Path: p}})
	if err != nil {
		return s.apiError(ctx, err)
	}
	r := execio.NewRecvReader(func() ([]byte, error) {
		m, err := stream.Recv()
		return m.GetData(), err
	})
	if local == "-" {
		if _, err := io.Copy(cmd.OutOrStdout(), r); err != nil {
			return s.apiError(ctx, err)
		}
		return nil
	}
	if fi, err := os.Stat(local); err == nil && fi.IsDir() {
		local = filepath.Join(local, path.Base(p))
	}
	// Written beside the destination and renamed over it: a failed copy
	// leaves no half file, and an existing one stays as it was.
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".ate-cp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	n, err := io.Copy(tmp, r)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return s.apiError(ctx, err)
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return err
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "copied %d bytes from actor %s:%s to %s\n", n, key, p, local)
	return nil
}
