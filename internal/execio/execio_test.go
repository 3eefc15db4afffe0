package execio

import (
	"bytes"
	"context"
	"crypto/rand"
	"io"
	"strings"
	"testing"

	atev1 "substrate.dev/ate/api/ate/v1"
	"substrate.dev/ate/internal/nodeapi"
)

// pipe is one direction of a stream: a channel of messages closed by the
// sender (io.EOF to the receiver).
type pipe[T any] chan T

func (p pipe[T]) send(m T) error { p <- m; return nil }
func (p pipe[T]) recv() (T, error) {
	m, ok := <-p
	if !ok {
		var zero T
		return zero, io.EOF
	}
	return m, nil
}

// TestServeCall joins the calling end to the serving end and runs a
// "process" that upper-cases stdin to stdout, reports the size on stderr
// and exits 7: everything crosses, in its own stream, and stdin ends.
func TestServeCall(t *testing.T) {
	reqs, resps := make(pipe[*atev1.ExecActorRequest], 16), make(pipe[*atev1.ExecActorResponse], 16)
	start := &atev1.ExecStart{Command: []string{"up"}, Stdin: true}
	go func() {
		p := Serve(start, reqs.recv, resps.send)
		in, _ := io.ReadAll(p.Stdin)
		_, _ = p.Stdout.Write(bytes.ToUpper(in))
		_, _ = io.WriteString(p.Stderr, "n="+string(rune('0'+len(in))))
		_ = resps.send(&atev1.ExecActorResponse{Msg: &atev1.ExecActorResponse_ExitCode{ExitCode: 7}})
	}()
	var out, errOut bytes.Buffer
	code, err := Call(context.Background(), reqs.send, resps.recv, strings.NewReader("hello"), nil, &out, &errOut)
	// The call is over, as when its RPC returns: Serve's reader sees the
	// stream end and stops.
	close(reqs)
	if err != nil || code != 7 || out.String() != "HELLO" || errOut.String() != "n=5" {
		t.Fatalf("Call = %d, %v, stdout %q, stderr %q; want 7, nil, HELLO, n=5", code, err, out.String(), errOut.String())
	}
}

// TestServeResize: a TTY start's size and later resizes reach the
// process's Resize channel, which closes when the stream ends.
func TestServeResize(t *testing.T) {
	reqs := make(pipe[*atev1.ExecActorRequest], 4)
	p := Serve(&atev1.ExecStart{Tty: true, Size: &atev1.TerminalSize{Rows: 24, Cols: 80}}, reqs.recv,
		func(*atev1.ExecActorResponse) error { return nil })
	reqs <- &atev1.ExecActorRequest{Msg: &atev1.ExecActorRequest_Resize{Resize: &atev1.TerminalSize{Rows: 50, Cols: 120}}}
	close(reqs)
	var got []nodeapi.WindowSize
	for sz := range p.Resize {
		got = append(got, sz)
	}
	want := []nodeapi.WindowSize{{Rows: 24, Cols: 80}, {Rows: 50, Cols: 120}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("sizes %v, want %v", got, want)
	}
}

// TestChunks: data sent in chunks of at most ChunkSize reads back
// byte-identical, through both SendChunks and ChunkWriter.
func TestChunks(t *testing.T) {
	data := make([]byte, 3*ChunkSize+123)
	_, _ = rand.Read(data)
	for _, tc := range []struct {
		name string
		send func(io.Reader, func([]byte) error) error
	}{
		{"SendChunks", SendChunks},
		{"ChunkWriter", func(r io.Reader, f func([]byte) error) error {
			_, err := io.Copy(ChunkWriter(f), r)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := make(pipe[[]byte], 64)
			err := tc.send(bytes.NewReader(data), func(b []byte) error {
				if len(b) > ChunkSize || len(b) == 0 {
					t.Errorf("chunk of %d bytes", len(b))
				}
				return ch.send(b)
			})
			close(ch)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(NewRecvReader(ch.recv))
			if err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read back %d bytes (err %v), want the %d sent", len(got), err, len(data))
			}
		})
	}
}
