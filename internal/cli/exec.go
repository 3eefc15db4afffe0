package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/execio"
	"substrate.dev/ate/internal/nodeapi"
)

// ExitCodeError makes Main exit with Code without printing anything: the
// exit status of a command `ate exec` ran, passed through.
type ExitCodeError struct{ Code int }

func (e *ExitCodeError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// execStartFailedCode is `ate exec`'s exit status when the command could
// not be started in the actor (no such program), as a shell's 127.
const execStartFailedCode = 127

func newExecCommand(a *app) *cobra.Command {
	var opts execOptions
	cmd := &cobra.Command{Use: "exec KIND NAME -- COMMAND [ARG...]", Short: "Run a command inside a running actor"}
	actor := &cobra.Command{
		Use:   "actor NAME | ATESPACE/NAME -- COMMAND [ARG...]",
		Short: "Run a command in a RUNNING actor's container, beside its main process",
		Long: "Run a command in a RUNNING actor's container, beside its main process.\n" +
			"stdout and stderr are passed through, and the command's exit status becomes\n" +
			"ate's (127 when it cannot be started). -i passes stdin; -t runs it on a\n" +
			"terminal (stderr then arrives on stdout). The actor is never resumed for an\n" +
			"exec; while the command runs the actor counts as busy (no idle suspend, no\n" +
			"eviction), and a suspend, pause or delete ends the command. --timeout does\n" +
			"not apply: the command runs until it ends.",
		Example: "  ate exec actor notes-1 -- ls -l /data\n" +
			"  echo hi | ate exec actor notes-1 -i -- python3 -c 'import sys; print(sys.stdin.read())'\n" +
			"  ate exec actor notes-1 -it -- python3",
		Args: cobra.MinimumNArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() != 1 {
				return errors.New("put the command after --: ate exec actor NAME -- COMMAND [ARG...]")
			}
			return a.exec(cmd, args[0], args[1:], opts)
		},
	}
	f := actor.Flags()
	f.BoolVarP(&opts.stdin, "stdin", "i", false, "pass stdin to the command")
	f.BoolVarP(&opts.tty, "tty", "t", false, "run the command on a terminal (with -i and a terminal on stdin: raw mode)")
	f.StringArrayVarP(&opts.env, "env", "e", nil, "KEY=VALUE added to the command's environment (repeatable)")
	f.StringVarP(&opts.workdir, "workdir", "w", "", "working directory of the command (default the container's)")
	kindGroup(cmd, actor)
	return cmd
}

type execOptions struct {
	stdin, tty bool
	env        []string
	workdir    string
}

func (a *app) exec(cmd *cobra.Command, arg string, command []string, opts execOptions) error {
	key, err := a.actorKey(arg)
	if err != nil {
		return err
	}
	s, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer s.close()
	ctx, cancel := context.WithCancel(cmd.Context())
	defer cancel()
	stream, err := s.client.ExecActor(ctx)
	if err != nil {
		return s.apiError(ctx, err)
	}
	start := &atev1.ExecStart{Atespace: key.Atespace, Name: key.Name, Command: command, Env: opts.env,
		WorkingDir: opts.workdir, Tty: opts.tty, Stdin: opts.stdin}
	var stdin io.Reader
	if opts.stdin {
		stdin = cmd.InOrStdin()
	}
	var resize chan nodeapi.WindowSize
	if opts.tty {
		restore, sizes, size := terminal(ctx, cmd.InOrStdin(), cmd.OutOrStdout(), opts.stdin)
		defer restore()
		start.Size, resize = size, sizes
	}
	if err := stream.Send(&atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_Start{Start: start}}); err != nil {
		_, err = stream.Recv() // the status says why
		return s.apiError(ctx, err)
	}
	code, err := execio.Call(ctx, stream.Send, stream.Recv, stdin, resize, cmd.OutOrStdout(), cmd.ErrOrStderr())
	if err != nil {
		if st, ok := status.FromError(err); ok && hasReason(st, "EXEC_START_FAILED") {
			fmt.Fprintf(cmd.ErrOrStderr(), "Error: %s\n", st.Message())
			return &ExitCodeError{Code: execStartFailedCode}
		}
		return s.apiError(ctx, err)
	}
	if code != 0 {
		return &ExitCodeError{Code: code}
	}
	return nil
}

// terminal puts the local terminal in raw mode when stdin is one and
// will be passed (a remote terminal echoes and edits for itself), and
// reports the local window size now and on every SIGWINCH. restore
// undoes both.
func terminal(ctx context.Context, in io.Reader, out io.Writer, passStdin bool) (restore func(), sizes chan nodeapi.WindowSize, size *atev1.TerminalSize) {
	restore = func() {}
	sizeOf := func() (*atev1.TerminalSize, bool) {
		f, ok := out.(*os.File)
		if !ok {
			return nil, false
		}
		w, h, err := term.GetSize(int(f.Fd()))
		if err != nil {
			return nil, false
		}
		return &atev1.TerminalSize{Rows: uint32(h), Cols: uint32(w)}, true
	}
	size, _ = sizeOf()
	if f, ok := in.(*os.File); ok && passStdin && term.IsTerminal(int(f.Fd())) {
		if old, err := term.MakeRaw(int(f.Fd())); err == nil {
			restore = func() { _ = term.Restore(int(f.Fd()), old) }
		}
	}
	sizes = make(chan nodeapi.WindowSize, 1)
	winch := make(chan os.Signal, 1)
	signal.Notify(winch, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(winch)
		for {
			select {
			case <-ctx.Done():
				return
			case <-winch:
				if sz, ok := sizeOf(); ok {
					select {
					case sizes <- nodeapi.WindowSize{Rows: uint16(sz.Rows), Cols: uint16(sz.Cols)}:
					default:
					}
				}
			}
		}
	}()
	return restore, sizes, size
}

// hasReason reports whether st carries the ate API's ErrorInfo reason.
func hasReason(st *status.Status, reason string) bool {
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == atev1.ErrorDomain && info.GetReason() == reason {
			return true
		}
	}
	return false
}
