package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	atev1 "substrate.dev/ate/api/ate/v1"
)

func (f *fakeControl) CreateIngressToken(_ context.Context, req *atev1.CreateIngressTokenRequest) (*atev1.IngressToken, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	return &atev1.IngressToken{Atespace: req.GetAtespace(), Name: req.GetName(), Token: "ate_it_secret", CreateTime: ago(time.Minute)}, nil
}

func (f *fakeControl) ListIngressTokens(_ context.Context, req *atev1.ListIngressTokensRequest) (*atev1.ListIngressTokensResponse, error) {
	if req.GetAtespace() == "empty" {
		return &atev1.ListIngressTokensResponse{}, nil
	}
	return &atev1.ListIngressTokensResponse{Tokens: []*atev1.IngressToken{
		{Atespace: req.GetAtespace(), Name: "web", CreateTime: ago(2 * time.Hour)},
	}}, nil
}

func (f *fakeControl) DeleteIngressToken(_ context.Context, req *atev1.DeleteIngressTokenRequest) (*atev1.DeleteIngressTokenResponse, error) {
	if req.GetName() != "web" {
		return nil, status.Errorf(codes.NotFound, "ingress token %s/%s: not found", req.GetAtespace(), req.GetName())
	}
	return &atev1.DeleteIngressTokenResponse{}, nil
}

// TestIngressTokenCommands: create prints the token alone on stdout (for
// TOKEN=$(…)) with a note on stderr; get lists names and ages; delete
// says what it did, or why not.
func TestIngressTokenCommands(t *testing.T) {
	for _, tc := range []struct {
		args         []string
		code         int
		stdout       string
		stderrSubstr string
	}{
		{[]string{"create", "ingresstoken", "web", "-n", "team"}, 0, "ate_it_secret\n", "ingress token team/web created; it is shown only now"},
		{[]string{"create", "ingresstoken", "team/web", "-o", "json"}, 0, `"token": "ate_it_secret"`, ""},
		{[]string{"get", "ingresstokens", "-n", "team"}, 0, "NAME       AGE\nteam/web   2h\n", ""},
		{[]string{"get", "ingresstokens", "-n", "empty"}, 0, "", "No ingress tokens found in atespace empty."},
		{[]string{"delete", "ingresstoken", "web"}, 0, "ingress token default/web deleted\n", ""},
		{[]string{"delete", "ingresstoken", "gone"}, 1, "", "not found"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			got := runServer(t, newFake(), tc.args...)
			if got.code != tc.code || !strings.Contains(got.stdout, tc.stdout) || !strings.Contains(got.stderr, tc.stderrSubstr) {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit %d, stdout with %q, stderr with %q",
					got.code, got.stdout, got.stderr, tc.code, tc.stdout, tc.stderrSubstr)
			}
			if !strings.Contains(strings.Join(tc.args, " "), "-o json") && got.stdout != tc.stdout {
				t.Fatalf("stdout %q, want exactly %q", got.stdout, tc.stdout)
			}
		})
	}
}
