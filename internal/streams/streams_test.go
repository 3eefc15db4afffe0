package streams

import (
	"net/http"
	"strings"
	"testing"
)

func TestIsListen(t *testing.T) {
	tests := []struct {
		name   string
		method string
		header http.Header
		want   bool
	}{
		{"event-stream GET", http.MethodGet, http.Header{"Accept": {"text/event-stream"}}, true},
		{"among others, any case, with parameters", http.MethodGet, http.Header{"Accept": {"application/json, Text/Event-Stream;q=0.9"}}, true},
		{"second Accept line", http.MethodGet, http.Header{"Accept": {"application/json", "text/event-stream"}}, true},
		{"MCP POST accepting a stream", http.MethodPost, http.Header{"Accept": {"application/json, text/event-stream"}}, false},
		{"plain GET", http.MethodGet, http.Header{"Accept": {"application/json"}}, false},
		{"no Accept", http.MethodGet, nil, false},
		{"WebSocket", http.MethodGet, http.Header{"Accept": {"text/event-stream"}, "Upgrade": {"websocket"}}, false},
		{"lookalike", http.MethodGet, http.Header{"Accept": {"text/event-streams"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := http.NewRequest(tt.method, "http://x/", nil)
			if err != nil {
				t.Fatal(err)
			}
			if tt.header != nil {
				r.Header = tt.header
			}
			if got := IsListen(r); got != tt.want {
				t.Errorf("IsListen = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		idle, wakeOn string
		want         Policy
		err          string
	}{
		{"", "", Policy{}, ""},
		{"count", "any", Policy{}, ""},
		{"ignore", "", Policy{IgnoreIdle: true}, ""},
		{"", "request", Policy{WakeOnRequest: true}, ""},
		{"ignore", "request", Policy{IgnoreIdle: true, WakeOnRequest: true}, ""},
		{"Ignore", "", Policy{}, `streams.idle "Ignore": want count or ignore`},
		{"", "stream", Policy{}, `streams.wakeOn "stream": want any or request`},
	}
	for _, tt := range tests {
		t.Run(tt.idle+"/"+tt.wakeOn, func(t *testing.T) {
			got, err := Parse(tt.idle, tt.wakeOn)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("Parse error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Errorf("Parse = %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}
}

func TestBusy(t *testing.T) {
	if got := (Policy{}).Busy(3, 2); got != 3 {
		t.Errorf("count: Busy(3, 2) = %d, want 3", got)
	}
	if got := (Policy{IgnoreIdle: true}).Busy(3, 2); got != 1 {
		t.Errorf("ignore: Busy(3, 2) = %d, want 1", got)
	}
}
