package auth

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	atev1 "substrate.dev/ate/api/ate/v1"
)

// TestEveryMethodHasARule fails when a method is added to Control or
// NodeRegistry without a rule in Methods (or a rule outlives its method).
func TestEveryMethodHasARule(t *testing.T) {
	all := map[string]bool{}
	for _, sd := range []struct {
		name    string
		methods []string
	}{
		{atev1.Control_ServiceDesc.ServiceName, methodNames(atev1.Control_ServiceDesc.Methods, atev1.Control_ServiceDesc.Streams)},
		{atev1.NodeRegistry_ServiceDesc.ServiceName, methodNames(atev1.NodeRegistry_ServiceDesc.Methods, atev1.NodeRegistry_ServiceDesc.Streams)},
		{atev1.NodeIdentity_ServiceDesc.ServiceName, methodNames(atev1.NodeIdentity_ServiceDesc.Methods, atev1.NodeIdentity_ServiceDesc.Streams)},
		// Only Check of it is served (apiserver.StoreHealth).
		{healthpb.Health_ServiceDesc.ServiceName, []string{"Check"}},
	} {
		for _, m := range sd.methods {
			full := "/" + sd.name + "/" + m
			all[full] = true
			rule, ok := Methods[full]
			if !ok {
				t.Errorf("%s has no rule in auth.Methods", full)
				continue
			}
			if rule.Verb == "" || rule.Access == 0 {
				t.Errorf("%s: rule without verb or access: %+v", full, rule)
			}
			if (rule.Access == Read || rule.Access == Write) && rule.Atespace == nil && !rule.LookupAlarm {
				t.Errorf("%s: an atespace rule needs Atespace or LookupAlarm", full)
			}
			if rule.Filter != nil && rule.Access != Read {
				t.Errorf("%s: only reads are filtered", full)
			}
			// Only a method that checks a credential of its own may skip
			// the interceptors; a new one must be added here on purpose.
			if rule.Access == SelfAuthenticating && full != atev1.NodeIdentity_IssueNodeCertificate_FullMethodName {
				t.Errorf("%s: self-authenticating, which only IssueNodeCertificate is", full)
			}
			if rule.Access == Public && full != healthpb.Health_Check_FullMethodName {
				t.Errorf("%s: public, which only the health check is", full)
			}
		}
	}
	for m := range Methods {
		if !all[m] {
			t.Errorf("auth.Methods has a rule for %s, which no service has", m)
		}
	}
}

func methodNames(unary []grpc.MethodDesc, streams []grpc.StreamDesc) []string {
	var out []string
	for _, m := range unary {
		out = append(out, m.MethodName)
	}
	for _, s := range streams {
		out = append(out, s.StreamName)
	}
	return out
}

// TestComponentsMayCallWhatTheyCall: every Control method the router and
// the controller call (found in their source) is allowed to their kind,
// so adding a call there without a rule fails here, not in production.
func TestComponentsMayCallWhatTheyCall(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		call *regexp.Regexp
		c    Component
	}{
		{"../router", regexp.MustCompile(`\bclient\.([A-Z]\w*)\(ctx`), ComponentRouter},
		{"../k8s/controller", regexp.MustCompile(`\bapi\.([A-Z]\w*)\(`), ComponentController},
	} {
		files, err := filepath.Glob(filepath.Join(tc.dir, "*.go"))
		if err != nil || len(files) == 0 {
			t.Fatalf("%s: %v", tc.dir, err)
		}
		found := 0
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range tc.call.FindAllStringSubmatch(string(src), -1) {
				full := "/" + atev1.Control_ServiceDesc.ServiceName + "/" + m[1]
				rule, ok := Methods[full]
				if !ok {
					continue // not a Control method (another client's)
				}
				found++
				if !slices.Contains(rule.Components, tc.c) {
					t.Errorf("%s calls %s, which auth.Methods does not allow to %s", f, m[1], tc.c)
				}
			}
		}
		if found == 0 {
			t.Errorf("no Control calls found in %s: the pattern is stale", tc.dir)
		}
	}
}
