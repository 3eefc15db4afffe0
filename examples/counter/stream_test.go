package main

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

func TestStreams(t *testing.T) {
	srv := httptest.NewServer(newHandler(nil, true)) // /sleep is a test endpoint
	t.Cleanup(srv.Close)

	t.Run("sse", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/sse?n=3&gap=1")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		want := "id: 1\ndata: event 1\n\nid: 2\ndata: event 2\n\nid: 3\ndata: event 3\n\n"
		if resp.Header.Get("Content-Type") != "text/event-stream" || string(b) != want {
			t.Errorf("got %q %q", resp.Header.Get("Content-Type"), b)
		}
	})
	t.Run("sleep", func(t *testing.T) {
		resp, err := http.Get(srv.URL + "/sleep?ms=5&tag=x")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if b, _ := io.ReadAll(resp.Body); string(b) != "slept 5 ms tag=x\n" {
			t.Errorf("got %q", b)
		}
	})
	t.Run("echo is full duplex", func(t *testing.T) {
		pr, pw := io.Pipe()
		req, err := http.NewRequest(http.MethodPost, srv.URL+"/echo", pr)
		if err != nil {
			t.Fatal(err)
		}
		respc := make(chan *http.Response, 1)
		go func() {
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				pw.CloseWithError(err)
				close(respc)
				return
			}
			respc <- resp
		}()
		var br *bufio.Reader
		for i, line := range []string{"one\n", "two\n"} {
			if _, err := io.WriteString(pw, line); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				resp := <-respc
				if resp == nil {
					t.FailNow()
				}
				defer resp.Body.Close()
				br = bufio.NewReader(resp.Body)
			}
			// The echo of each line arrives before the next is sent.
			if got, err := br.ReadString('\n'); err != nil || got != line {
				t.Fatalf("echo %q: %q %v", line, got, err)
			}
		}
		pw.Close()
	})
	t.Run("websocket", func(t *testing.T) {
		ctx := t.Context()
		ws, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/ws",
			&websocket.DialOptions{HTTPHeader: http.Header{"Origin": {srv.URL}}})
		if err != nil {
			t.Fatal(err)
		}
		defer ws.CloseNow()
		if err := ws.Write(ctx, websocket.MessageText, []byte("hi")); err != nil {
			t.Fatal(err)
		}
		typ, got, err := ws.Read(ctx)
		if err != nil || string(got) != "hi" || typ != websocket.MessageText {
			t.Fatalf("echo: %v %q %v", typ, got, err)
		}
	})
}

func TestWarmup(t *testing.T) {
	wu := newWarmup(time.Hour, time.Second)
	srv := httptest.NewServer(newHandler(wu, false))
	t.Cleanup(srv.Close)
	get := func() int {
		resp, err := http.Get(srv.URL + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(); code != http.StatusOK {
		t.Fatalf("before a restore: %d", code)
	}
	// As if the process had been frozen for a minute: the first request
	// after it notices.
	wu.last.Store(time.Now().Add(-time.Minute).UnixNano())
	if code := get(); code != http.StatusServiceUnavailable {
		t.Fatalf("after a restore: %d, want 503 while warming up", code)
	}
}
