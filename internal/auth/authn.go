package auth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnauthenticated: a bearer token no authenticator accepts (unknown,
// malformed, badly signed, for another audience, expired). Its wrapped
// text says why for the server's log; callers answer the client with a
// fixed message so a guesser learns nothing.
var ErrUnauthenticated = errors.New("unauthenticated")

// errNoMatch: an authenticator does not know the token (the chain tries
// the next one); distinct from a token it recognises and rejects.
var errNoMatch = errors.New("token not recognised")

// Authenticator turns a bearer token into a user principal.
type Authenticator interface {
	// Authenticate returns the token's principal; an error wrapping
	// errNoMatch when the token is not this authenticator's kind, any
	// other error when it is and fails verification.
	Authenticate(ctx context.Context, token string) (*Principal, error)
}

// Chain tries its authenticators in order; the first that recognises the
// token decides. A nil or empty Chain accepts nothing.
type Chain []Authenticator

// Authenticate returns the principal of token, or an error wrapping
// ErrUnauthenticated.
func (c Chain) Authenticate(ctx context.Context, token string) (*Principal, error) {
	if token == "" {
		return nil, fmt.Errorf("%w: no bearer token", ErrUnauthenticated)
	}
	for _, a := range c {
		p, err := a.Authenticate(ctx, token)
		if errors.Is(err, errNoMatch) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
		}
		return p, nil
	}
	return nil, fmt.Errorf("%w: token not recognised by any authenticator", ErrUnauthenticated)
}

// Built-in subjects.
const (
	// AdminUser is the admin token's user.
	AdminUser = "ate:admin"
	// AdminsGroup is bound to the admin role built in.
	AdminsGroup = "ate:admins"
)

// StaticToken is one line of a static token file.
type StaticToken struct {
	Token  string
	User   string
	UID    string
	Groups []string
	// Component, when set, makes the token stand for a component (ate
	// up's in-process router, which has no client certificate of its
	// own); never read from a file.
	Component *Identity
}

// Static authenticates fixed tokens, comparing in constant time so the
// time an answer takes says nothing about how much of a guess matched.
type Static struct {
	tokens []StaticToken
}

// NewStatic returns an authenticator of tokens. Empty tokens are refused.
func NewStatic(tokens []StaticToken) (*Static, error) {
	for i, t := range tokens {
		if t.Token == "" {
			return nil, fmt.Errorf("static token %d: empty token", i+1)
		}
		if t.User == "" && t.Component == nil {
			return nil, fmt.Errorf("static token %d: empty user name", i+1)
		}
	}
	return &Static{tokens: tokens}, nil
}

// Authenticate implements Authenticator. Every token is compared, so the
// time does not depend on which one matched.
func (s *Static) Authenticate(_ context.Context, token string) (*Principal, error) {
	var found *StaticToken
	for i := range s.tokens {
		if subtle.ConstantTimeCompare([]byte(s.tokens[i].Token), []byte(token)) == 1 {
			found = &s.tokens[i]
		}
	}
	if found == nil {
		return nil, errNoMatch
	}
	if found.Component != nil {
		id := *found.Component
		return &Principal{Component: &id}, nil
	}
	return &Principal{Name: found.User, Groups: append([]string(nil), found.Groups...)}, nil
}

// ReadTokenFile reads a Kubernetes static token file (kube-apiserver's
// --token-auth-file): CSV lines token,user,uid[,"group1,group2"]; blank
// lines and lines starting with # are skipped. Errors name the line.
func ReadTokenFile(path string) ([]StaticToken, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("token file: %w", err)
	}
	defer f.Close()
	return parseTokenCSV(f, path)
}

func parseTokenCSV(r io.Reader, name string) ([]StaticToken, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	var out []StaticToken
	seen := map[string]bool{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("token file %s: %w", name, err)
		}
		line, _ := cr.FieldPos(0)
		if len(rec) < 3 || len(rec) > 4 {
			return nil, fmt.Errorf("token file %s line %d: want token,user,uid[,\"group1,group2\"], got %d fields", name, line, len(rec))
		}
		t := StaticToken{Token: strings.TrimSpace(rec[0]), User: strings.TrimSpace(rec[1]), UID: strings.TrimSpace(rec[2])}
		if t.Token == "" || t.User == "" {
			return nil, fmt.Errorf("token file %s line %d: empty token or user", name, line)
		}
		if seen[t.Token] {
			return nil, fmt.Errorf("token file %s line %d: token repeated", name, line)
		}
		seen[t.Token] = true
		if len(rec) == 4 {
			for _, g := range strings.Split(rec[3], ",") {
				if g = strings.TrimSpace(g); g != "" {
					t.Groups = append(t.Groups, g)
				}
			}
		}
		out = append(out, t)
	}
}

// NewToken returns a random bearer token: 32 bytes from crypto/rand,
// base64url without padding.
func NewToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// AdminTokenName is the admin token's file in `ate up`'s data directory.
const AdminTokenName = "admin-token"

// EnsureAdminToken returns the admin token kept in dataDir/admin-token,
// creating it (0600) with a new random token on first use. A file that
// exists but is empty is an error, not silently replaced.
func EnsureAdminToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, AdminTokenName)
	data, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(data))
		if tok == "" {
			return "", fmt.Errorf("admin token %s is empty; delete it to make a new one", path)
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("admin token: %w", err)
	}
	tok, err := NewToken()
	if err != nil {
		return "", err
	}
	// O_EXCL: two starts racing keep one token.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("admin token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("admin token: %w", err)
	}
	return tok, nil
}

// AdminToken is the static token of the admin user.
func AdminToken(token string) StaticToken {
	return StaticToken{Token: token, User: AdminUser, UID: AdminUser, Groups: []string{AdminsGroup}}
}
