package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestServer: a private server takes connections, gives each caller its
// own database, comes back on the same port after Restart, and leaves
// neither process nor directory after Stop.
func TestServer(t *testing.T) {
	ctx := context.Background()
	s, err := StartLocal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	u1, u2 := s.NewDatabase(t), s.NewDatabase(t)
	if u1 == u2 || !strings.HasPrefix(u1, "postgres://postgres@"+s.Addr()+"/") {
		t.Fatalf("databases %s and %s", u1, u2)
	}
	query := func(u string) (string, error) {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return "", err
		}
		defer conn.Close(ctx)
		var db string
		err = conn.QueryRow(ctx, "SELECT current_database()").Scan(&db)
		return db, err
	}
	if db, err := query(u1); err != nil || !strings.Contains(u1, "/"+db+"?") {
		t.Fatalf("current_database on %s = %q, %v", u1, db, err)
	}
	if os.Geteuid() == 0 {
		// As root the server runs as the postgres user.
		st, err := os.Stat(filepath.Join(s.dir, "data"))
		if err != nil || st.Sys().(*syscall.Stat_t).Uid != s.cred.Uid {
			t.Fatalf("data directory not owned by postgres: %v", err)
		}
	}

	addr := s.Addr()
	if err := s.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := query(u1); err != nil || s.Addr() != addr {
		t.Fatalf("after restart on %s (was %s): %v", s.Addr(), addr, err)
	}

	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
	default:
		t.Fatal("postgres still running after Stop")
	}
	if _, err := os.Stat(s.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("directory %s left after Stop: %v", s.dir, err)
	}
	if _, err := query(u1); err == nil {
		t.Fatal("server answers after Stop")
	}
}

// TestMissingBinariesFail: with no PostgreSQL installed, the error says
// how to install it (tests fail, never skip).
func TestMissingBinariesFail(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := findBin(t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "hack/install-postgres.sh") {
		t.Fatalf("findBin with nothing installed = %v", err)
	}
}

// TestFindBinPicksHighest: of several installed majors the highest is
// used, by number, not by string (10 > 9).
func TestFindBinPicksHighest(t *testing.T) {
	root := t.TempDir()
	for _, v := range []string{"9", "10", "15"} {
		if err := os.MkdirAll(filepath.Join(root, v, "bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, v, "bin", "initdb"), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if got, err := findBin(root); err != nil || got != filepath.Join(root, "15", "bin") {
		t.Fatalf("findBin = %s, %v", got, err)
	}
}

// TestDyingBinaryLeavesNoServer: a test binary that exits without Stop
// (here: a child test process that starts a server and exits at once)
// takes its postgres with it.
func TestDyingBinaryLeavesNoServer(t *testing.T) {
	if os.Getenv("PGTEST_CHILD") == "1" {
		s, err := StartLocal(context.Background())
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		fmt.Println("postmaster", s.proc.cmd.Process.Pid, s.dir)
		os.Exit(3) // no Stop: as a panic or a timeout would end it
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestDyingBinaryLeavesNoServer$")
	cmd.Env = append(os.Environ(), "PGTEST_CHILD=1")
	out, _ := cmd.Output()
	var pid int
	var dir string
	if _, err := fmt.Sscanf(string(out), "postmaster %d %s", &pid, &dir); err != nil {
		t.Fatalf("child said %q: %v", out, err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("postmaster %d still running 30 s after its test binary exited", pid)
		}
		time.Sleep(10 * time.Millisecond) // pacing the poll
	}
	if b, err := os.ReadFile(filepath.Join(dir, "postgres.log")); err != nil || !strings.Contains(string(b), "immediate shutdown request") {
		t.Errorf("postgres did not log an immediate shutdown (the parent-death signal): %v\n%s", err, b)
	}
}

// TestPasswordDatabase: the role of NewPasswordDatabase reaches its
// database with its password, and is refused without it or with another.
func TestPasswordDatabase(t *testing.T) {
	ctx := context.Background()
	s, err := StartLocal(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Stop() })
	raw := s.NewPasswordDatabase(t)
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	password, ok := u.User.Password()
	if !ok || len(password) < 16 {
		t.Fatalf("URL %s has no password", u.Redacted())
	}
	connect := func(u string) error {
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx)
	}
	if err := connect(raw); err != nil {
		t.Fatalf("with its password: %v", err)
	}
	for name, user := range map[string]*url.Userinfo{
		"no password":    url.User(u.User.Username()),
		"wrong password": url.UserPassword(u.User.Username(), password+"x"),
	} {
		v := *u
		v.User = user
		if err := connect(v.String()); err == nil || !strings.Contains(err.Error(), "password") {
			t.Errorf("%s: connect = %v, want a password authentication failure", name, err)
		}
	}
}
