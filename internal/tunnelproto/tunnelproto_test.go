package tunnelproto

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestWriteError: each kind's status, marker, Retry-After and fixed text.
func TestWriteError(t *testing.T) {
	tests := []struct {
		kind       ErrorKind
		wantStatus int
		wantRetry  string
		wantBody   string
	}{
		{KindRefused, http.StatusBadGateway, "", "actor did not answer\n"},
		{KindUpstream, http.StatusBadGateway, "", "actor did not answer\n"},
		{KindCut, http.StatusServiceUnavailable, "1", "actor is being suspended; retry\n"},
	}
	for _, tt := range tests {
		t.Run(string(tt.kind), func(t *testing.T) {
			w := httptest.NewRecorder()
			WriteError(w, tt.kind)
			if w.Code != tt.wantStatus || w.Header().Get(HeaderError) != string(tt.kind) ||
				w.Header().Get("Retry-After") != tt.wantRetry || w.Body.String() != tt.wantBody {
				t.Errorf("got %d %s=%q Retry-After=%q %q, want %d %q %q %q", w.Code, HeaderError, w.Header().Get(HeaderError),
					w.Header().Get("Retry-After"), w.Body.String(), tt.wantStatus, tt.kind, tt.wantRetry, tt.wantBody)
			}
		})
	}
}
