package auth

import (
	"strings"
	"testing"
)

func TestParseIngressPolicy(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    IngressPolicy
		wantErr string
	}{
		{"", IngressPublic, ""},
		{"public", IngressPublic, ""},
		{"token", IngressToken, ""},
		{"Token", IngressPublic, `ingress.policy "Token": want "public" (the default) or "token"`},
		{"oidc", IngressPublic, `ingress.policy "oidc"`},
	} {
		got, err := ParseIngressPolicy(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseIngressPolicy(%q): error %v, want %q", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want || got.String() != map[string]string{"": "public"}[tc.in]+tc.in {
			t.Errorf("ParseIngressPolicy(%q) = %v (%s), %v; want %v", tc.in, got, got, err, tc.want)
		}
	}
}

func TestBearerToken(t *testing.T) {
	for _, tc := range []struct {
		header, want string
		ok           bool
	}{
		{"Bearer abc", "abc", true},
		{"bearer abc", "abc", true},
		{"BEARER  abc ", "abc", true},
		{"Bearer", "", false},
		{"Bearer ", "", false},
		{"Basic YWJj", "", false},
		{"", "", false},
		{"Bearerabc", "", false},
	} {
		got, ok := BearerToken(tc.header)
		if got != tc.want || ok != tc.ok {
			t.Errorf("BearerToken(%q) = %q, %v; want %q, %v", tc.header, got, ok, tc.want, tc.ok)
		}
	}
}

func TestNewIngressToken(t *testing.T) {
	a, b := NewIngressToken(), NewIngressToken()
	if a == b || !IsIngressToken(a) || len(a) != len("ate_it_")+43 {
		t.Fatalf("tokens %q, %q: want two distinct ate_it_ tokens of 50 characters", a, b)
	}
	if h := HashToken(a); len(h) != 64 || h == HashToken(b) || strings.Contains(h, a) {
		t.Fatalf("HashToken(%q) = %q: want 64 hex digits, distinct per token", a, h)
	}
}
