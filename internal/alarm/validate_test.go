package alarm

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestValidate(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name string
		at   time.Time
		path string
		want string // substring of the error; "" = valid
	}{
		{"ok", now.Add(time.Minute), "/tick", ""},
		{"query", now.Add(time.Minute), "/tick?x=1", ""},
		{"a second of skew", now.Add(-500 * time.Millisecond), "/tick", ""},
		{"longest path", now.Add(time.Minute), "/" + strings.Repeat("a", MaxPathLen-1), ""},
		{"a year", now.Add(MaxAhead), "/tick", ""},
		{"empty path", now.Add(time.Minute), "", "path is empty"},
		{"relative path", now.Add(time.Minute), "tick", "must start with '/'"},
		{"long path", now.Add(time.Minute), "/" + strings.Repeat("a", MaxPathLen), "at most 1024"},
		{"space", now.Add(time.Minute), "/a b", "spaces or control"},
		{"newline", now.Add(time.Minute), "/a\nHost: x", "spaces or control"},
		{"no time", time.Time{}, "/tick", "no time given"},
		{"past", now.Add(-time.Hour), "/tick", "in the past"},
		{"beyond a year", now.Add(MaxAhead + time.Second), "/tick", "more than a year"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Validate(now, tc.at, tc.path)
			if tc.want == "" {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}

func TestParseRequest(t *testing.T) {
	now := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name, body string
		at         time.Time
		want       string // error substring; "" = valid
	}{
		{"in", `{"in": "10m", "path": "/tick"}`, now.Add(10 * time.Minute), ""},
		{"at", `{"at": "2026-12-02T02:00:00Z", "path": "/tick"}`, now.Add(time.Hour), ""},
		{"at with offset", `{"at": "2026-12-02T03:00:00+01:00", "path": "/t"}`, now.Add(time.Hour), ""},
		{"both", `{"at": "2026-12-02T02:00:00Z", "in": "1m", "path": "/tick"}`, time.Time{}, "not both"},
		{"neither", `{"path": "/tick"}`, time.Time{}, "set a time"},
		{"bad at", `{"at": "tomorrow", "path": "/tick"}`, time.Time{}, "not RFC 3339"},
		{"bad in", `{"in": "soon", "path": "/tick"}`, time.Time{}, "not a positive duration"},
		{"negative in", `{"in": "-1m", "path": "/tick"}`, time.Time{}, "not a positive duration"},
		{"no path", `{"in": "1m"}`, time.Time{}, "path is empty"},
		{"unknown field", `{"in": "1m", "path": "/t", "method": "GET"}`, time.Time{}, "unknown field"},
		{"not json", `in=1m`, time.Time{}, "body is not"},
		{"too far", `{"in": "9000h", "path": "/t"}`, time.Time{}, "more than a year"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			at, path, err := ParseRequest(now, []byte(tc.body))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("ParseRequest: %v", err)
				}
				if !at.Equal(tc.at) || path == "" {
					t.Fatalf("ParseRequest = %s %q, want %s", at, path, tc.at)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseRequest = %v, want ErrInvalid saying %q", err, tc.want)
			}
		})
	}
}
