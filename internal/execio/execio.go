// Package execio carries `ate exec` and `ate cp` over gRPC streams: the
// serving end turns an ExecActorRequest stream into a nodeapi.Process's
// input and its output into ExecActorResponse messages (Serve), the
// calling end does the reverse for a local process's stdio (Call), and
// both ends of a file copy move data in ChunkSize messages. The API
// server uses both ends (Control serves, the node protocol calls), the
// node agent serves and the CLI calls.
package execio

import (
	"context"
	"errors"
	"io"
	"sync"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
)

// ChunkSize is the largest data field one stream message carries, in
// bytes: well under gRPC's 4 MiB default message limit, large enough
// that per-message cost is small.
const ChunkSize = 256 << 10

// Serve returns the nodeapi.Process for start whose input comes from
// recv (the requests after the start) and whose output goes to send.
// Requests are read on a goroutine that ends when recv fails (the call
// ended); send is serialised, since stdout and stderr write concurrently.
func Serve(start *atev1.ExecStart, recv func() (*atev1.ExecActorRequest, error), send func(*atev1.ExecActorResponse) error) nodeapi.Process {
	p := nodeapi.Process{Args: start.GetCommand(), Env: start.GetEnv(), Cwd: start.GetWorkingDir(), TTY: start.GetTty()}
	var mu sync.Mutex
	out := func(stderr bool) io.Writer {
		return writerFunc(func(b []byte) (int, error) {
			m := &atev1.ExecActorResponse{Msg: &atev1.ExecActorResponse_Stdout{Stdout: b}}
			if stderr {
				m.Msg = &atev1.ExecActorResponse_Stderr{Stderr: b}
			}
			mu.Lock()
			defer mu.Unlock()
			if err := send(m); err != nil {
				return 0, err
			}
			return len(b), nil
		})
	}
	p.Stdout, p.Stderr = out(false), out(true)
	var stdin *io.PipeWriter
	if start.GetStdin() {
		var r *io.PipeReader
		r, stdin = io.Pipe()
		p.Stdin = r
	}
	var resize chan nodeapi.WindowSize
	if start.GetTty() {
		resize = make(chan nodeapi.WindowSize, 4)
		if sz := start.GetSize(); sz != nil {
			resize <- nodeapi.WindowSize{Rows: uint16(sz.GetRows()), Cols: uint16(sz.GetCols())}
		}
		p.Resize = resize
	}
	go func() {
		defer func() {
			if stdin != nil {
				_ = stdin.Close()
			}
			if resize != nil {
				close(resize)
			}
		}()
		for {
			m, err := recv()
			if err != nil {
				return
			}
			switch {
			case m.GetStdin() != nil && stdin != nil:
				if _, err := stdin.Write(m.GetStdin()); err != nil {
					stdin = nil
				}
			case m.GetStdinClose() && stdin != nil:
				_ = stdin.Close()
				stdin = nil
			case m.GetResize() != nil && resize != nil:
				select {
				case resize <- nodeapi.WindowSize{Rows: uint16(m.GetResize().GetRows()), Cols: uint16(m.GetResize().GetCols())}:
				default: // a later size follows; never block input behind it
				}
			}
		}
	}()
	return p
}

// Call runs the calling end of an exec whose start was already sent:
// it sends stdin (then stdin_close at its EOF) and the sizes from resize,
// delivers stdout and stderr, and returns the exit code. The stream's
// error comes back as recv returns it (the caller maps it). stdin and
// resize may be nil.
func Call(ctx context.Context, send func(*atev1.ExecActorRequest) error, recv func() (*atev1.ExecActorResponse, error),
	stdin io.Reader, resize <-chan nodeapi.WindowSize, stdout, stderr io.Writer) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var mu sync.Mutex // send is not safe for concurrent use
	sendLocked := func(m *atev1.ExecActorRequest) error {
		mu.Lock()
		defer mu.Unlock()
		return send(m)
	}
	if stdin != nil {
		go func() {
			buf := make([]byte, 32<<10)
			for ctx.Err() == nil {
				n, err := stdin.Read(buf)
				if n > 0 && sendLocked(&atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_Stdin{Stdin: append([]byte(nil), buf[:n]...)}}) != nil {
					return
				}
				if err != nil {
					_ = sendLocked(&atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_StdinClose{StdinClose: true}})
					return
				}
			}
		}()
	}
	if resize != nil {
		go func() {
			for {
				select {
				case <-ctx.Done():
					return
				case sz, ok := <-resize:
					if !ok {
						return
					}
					_ = sendLocked(&atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_Resize{Resize: &atev1.TerminalSize{Rows: uint32(sz.Rows), Cols: uint32(sz.Cols)}}})
				}
			}
		}()
	}
	for {
		m, err := recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return 0, io.ErrUnexpectedEOF // the server always ends with an exit code
			}
			return 0, err
		}
		switch x := m.GetMsg().(type) {
		case *atev1.ExecActorResponse_Stdout:
			if stdout != nil {
				_, _ = stdout.Write(x.Stdout)
			}
		case *atev1.ExecActorResponse_Stderr:
			if stderr != nil {
				_, _ = stderr.Write(x.Stderr)
			}
		case *atev1.ExecActorResponse_ExitCode:
			return int(x.ExitCode), nil
		}
	}
}

// SendChunks reads r to its end and sends it as data messages of at most
// ChunkSize bytes, built by msg.
func SendChunks(r io.Reader, send func(data []byte) error) error {
	buf := make([]byte, ChunkSize)
	for {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if serr := send(append([]byte(nil), buf[:n]...)); serr != nil {
				return serr
			}
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// RecvReader is an io.Reader over data messages: next returns the next
// message's data, io.EOF at the stream's end.
type RecvReader struct {
	next func() ([]byte, error)
	buf  []byte
}

// NewRecvReader reads the data next returns.
func NewRecvReader(next func() ([]byte, error)) *RecvReader { return &RecvReader{next: next} }

func (r *RecvReader) Read(b []byte) (int, error) {
	for len(r.buf) == 0 {
		d, err := r.next()
		if err != nil {
			return 0, err
		}
		r.buf = d
	}
	n := copy(b, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// ChunkWriter is an io.Writer that sends what it is given as data
// messages of at most ChunkSize bytes.
type ChunkWriter func(data []byte) error

func (w ChunkWriter) Write(b []byte) (int, error) {
	for off := 0; off < len(b); off += ChunkSize {
		end := min(off+ChunkSize, len(b))
		if err := w(append([]byte(nil), b[off:end]...)); err != nil {
			return off, err
		}
	}
	return len(b), nil
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }
