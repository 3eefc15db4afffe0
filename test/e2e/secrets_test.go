package e2e

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestAPIServerStorePasswordNotShown: `ate apiserver` over a PostgreSQL
// that checks passwords, given the URL in $ATE_STORE or in --store-file,
// reaches the database; and its password shows on no process's command
// line (what ps and /proc/<pid>/cmdline show every user of the machine),
// in no log record, and in no answer of its listeners (management,
// pprof, dashboard), whose /debug/pprof/cmdline is never served. --store
// still takes a URL with a password, with a warning, and the listeners
// and the log keep it to themselves too; only its own command line has
// it, which is what the warning says.
func TestAPIServerStorePasswordNotShown(t *testing.T) {
	pg := sharedPostgres(t)
	for _, how := range []string{"env", "file", "flag"} {
		t.Run(how, func(t *testing.T) {
			db := pg.NewPasswordDatabase(t)
			u, err := url.Parse(db)
			if err != nil {
				t.Fatal(err)
			}
			password, ok := u.User.Password()
			if !ok {
				t.Fatalf("pgtest gave no password: %s", u.Redacted())
			}
			mgmt, pprofAddr, dash := freeAddr(t), freeAddr(t), freeAddr(t)
			args := []string{"apiserver", "--data-dir", t.TempDir(), "--listen", freeAddr(t),
				"--management-addr", mgmt, "--pprof-addr", pprofAddr, "--http-addr", dash, "--log-level", "debug"}
			var env []string
			switch how {
			case "env":
				env = []string{"ATE_STORE=" + db}
			case "file":
				f := filepath.Join(t.TempDir(), "store-url")
				if err := os.WriteFile(f, []byte(db+"\n"), 0o600); err != nil {
					t.Fatal(err)
				}
				args = append(args, "--store-file", f)
			case "flag":
				args = append(args, "--store", db)
			}
			api := launchComponentEnv(t, env, "apiserver", "ate apiserver ready", args...)
			rec := api.waitReady()
			// It opened the database the password guards (the
			// embedded store would name a bolt:// file).
			if store, _ := rec["store"].(string); !strings.HasPrefix(store, "postgres://") || !strings.Contains(store, pg.Addr()) {
				t.Fatalf("ready with store %q, want the PostgreSQL at %s", store, pg.Addr())
			}

			for _, c := range []struct {
				url     string
				cmdline bool
			}{
				{"http://" + mgmt + "/healthz", false},
				{"http://" + mgmt + "/readyz", false},
				{"http://" + mgmt + "/metrics", false},
				{"http://" + mgmt + "/debug/pprof/", false},
				{"http://" + mgmt + "/debug/pprof/cmdline", true},
				{"http://" + pprofAddr + "/debug/pprof/", false},
				{"http://" + pprofAddr + "/debug/pprof/cmdline", true},
				{"http://" + pprofAddr + "/debug/pprof/goroutine?debug=2", false},
				{"http://" + dash + "/", false},
			} {
				resp, err := http.Get(c.url)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(body, []byte(password)) {
					t.Errorf("GET %s (%d) shows the store's password", c.url, resp.StatusCode)
				}
				if c.cmdline && resp.StatusCode != http.StatusNotFound {
					t.Errorf("GET %s = %d, want 404: the command line is never served", c.url, resp.StatusCode)
				}
			}

			own, err := os.ReadFile("/proc/" + strconv.Itoa(api.cmd.Process.Pid) + "/cmdline")
			if err != nil {
				t.Fatal(err)
			}
			if how == "flag" {
				if !bytes.Contains(own, []byte(password)) {
					t.Fatal("--store's URL is not on the command line: the test does not test what it says")
				}
				if api.records("the record store's password is on the command line, where ps and /proc/<pid>/cmdline show it to others on this machine: give it with --store-file or $ATE_STORE") != 1 {
					t.Error("no warning about the password on the command line")
				}
			} else {
				// Every process's, as ps lists them.
				procs, err := filepath.Glob("/proc/[0-9]*/cmdline")
				if err != nil {
					t.Fatal(err)
				}
				for _, p := range procs {
					if b, err := os.ReadFile(p); err == nil && bytes.Contains(b, []byte(password)) {
						t.Errorf("%s shows the store's password: %q", p, bytes.ReplaceAll(b, []byte{0}, []byte{' '}))
					}
				}
			}
			if strings.Contains(api.logText(), password) {
				t.Errorf("the API server's log shows the store's password:\n%s", api.logText())
			}
		})
	}
}
