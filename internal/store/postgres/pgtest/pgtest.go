// Package pgtest runs a real PostgreSQL server for tests: either the one
// named by $ATE_TEST_POSTGRES (a postgres:// URL of a superuser; never
// stopped or restarted), or a private one: initdb of a data directory in
// a temporary directory, one `postgres` process on a free loopback TCP
// port with its unix socket in that directory, trust authentication,
// fsync off (StartLocalDurable: on). The binaries come from the Debian package that
// hack/install-postgres.sh installs; without them Start fails (tests
// fail, never skip).
//
// PostgreSQL refuses to run as root, and CI runs as root: then initdb and
// postgres run as the `postgres` OS user (the Debian package creates it),
// which owns the temporary directory.
//
// initdb and start take about a second, so start one Server per test
// binary and give each test its own database:
//
//	var srv *pgtest.Server
//
//	func TestMain(m *testing.M) {
//		var err error
//		if srv, err = pgtest.Start(context.Background()); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//		code := m.Run()
//		if err := srv.Stop(); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//		}
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { url := srv.NewDatabase(t); … }
//
// A test binary that dies without Stop (a panic, a timeout, SIGKILL)
// leaves no server behind: postgres is the binary's direct child with a
// parent-death signal (SIGQUIT, PostgreSQL's immediate shutdown), so it
// exits with the binary; only the temporary directory stays.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"substrate.dev/ate/internal/testport"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable that points tests at an existing
// server instead of a private one.
const EnvURL = "ATE_TEST_POSTGRES"

// StartTimeout bounds how long Start and Restart wait for the server to
// accept connections.
const StartTimeout = 60 * time.Second

// stopTimeout bounds the wait for postgres to exit after a shutdown
// signal, after which it is killed.
const stopTimeout = 30 * time.Second

// Server is a running PostgreSQL server. Safe for concurrent use.
type Server struct {
	base     *url.URL // a superuser's URL, database "postgres"
	external bool

	// The rest is zero for an external server.
	dir  string // temporary directory: data/, the socket, postgres.log
	bin  string // the directory holding initdb and postgres
	port int
	cred *syscall.Credential // whom postgres runs as; nil: as us
	// durable keeps PostgreSQL's fsync and synchronous_commit defaults.
	durable bool

	mu      sync.Mutex // guards proc and stopped
	proc    *process   // the running postgres; nil while stopped
	stopped bool       // Stop was called: its databases are gone with it

	dbSeq atomic.Int64 // makes database names unique
}

// process is one run of postgres.
type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when it has exited
	err  error         // its exit status, set before done closes
}

// Start returns the server of $ATE_TEST_POSTGRES if set (after checking
// it answers), else StartLocal's. The caller must Stop it.
func Start(ctx context.Context) (*Server, error) {
	raw := os.Getenv(EnvURL)
	if raw == "" {
		return StartLocal(ctx)
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("pgtest: $%s=%q is not a postgres:// URL", EnvURL, raw)
	}
	s := &Server{base: u, external: true}
	if err := s.ping(ctx); err != nil {
		return nil, fmt.Errorf("pgtest: server of $%s: %w", EnvURL, err)
	}
	return s, nil
}

// StartLocal initdbs and starts a private server, whatever
// $ATE_TEST_POSTGRES says: for tests that stop or restart it. On error
// nothing is left running or on disk.
func StartLocal(ctx context.Context) (*Server, error) { return startLocal(ctx, false) }

// StartLocalDurable is StartLocal with PostgreSQL's durability defaults
// (fsync, synchronous_commit and full_page_writes on) and the data
// directory under os.TempDir (on disk, not a tmpfs, where that is so):
// for benchmarks whose number must include each commit's WAL flush. It
// also preloads pg_stat_statements, so a benchmark can count statements
// (round trips) after CREATE EXTENSION pg_stat_statements.
func StartLocalDurable(ctx context.Context) (*Server, error) { return startLocal(ctx, true) }

func startLocal(ctx context.Context, durable bool) (_ *Server, err error) {
	bin, err := findBin("/usr/lib/postgresql")
	if err != nil {
		return nil, err
	}
	s := &Server{bin: bin, durable: durable}
	if os.Geteuid() == 0 {
		if s.cred, err = postgresUser(); err != nil {
			return nil, err
		}
	}
	if s.dir, err = os.MkdirTemp("", "pgtest-"); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer func() {
		if err != nil {
			_ = s.Stop()
		}
	}()
	if s.cred != nil {
		if err := os.Chown(s.dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	if err := s.initdb(ctx); err != nil {
		return nil, err
	}
	// A port picked free can be taken before postgres binds it (another
	// test binary starting alongside); then postgres exits at once, and
	// another port is tried.
	for attempt := 1; ; attempt++ {
		if s.port, err = freePort(); err != nil {
			return nil, err
		}
		s.base = &url.URL{Scheme: "postgres", User: url.User("postgres"),
			Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)), Path: "/postgres", RawQuery: "sslmode=disable"}
		err = s.start(ctx)
		if err == nil || attempt == 3 || !strings.Contains(s.logTail(), "could not bind") {
			return s, err
		}
	}
}

// findBin returns the bin directory of the highest PostgreSQL major
// version installed under root (Debian's layout, root/<major>/bin), or
// else the directory of initdb on $PATH.
func findBin(root string) (string, error) {
	dirs, _ := filepath.Glob(filepath.Join(root, "*", "bin", "initdb"))
	version := func(p string) int {
		v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(p))))
		return v
	}
	slices.SortFunc(dirs, func(a, b string) int { return version(a) - version(b) })
	if len(dirs) > 0 {
		return filepath.Dir(dirs[len(dirs)-1]), nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p), nil
	}
	return "", errors.New("pgtest: no PostgreSQL server binaries (initdb) under /usr/lib/postgresql/*/bin or on $PATH: run hack/install-postgres.sh")
}

// postgresUser is the credential of the `postgres` OS user, whom the
// server runs as when we are root.
func postgresUser() (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtest: running as root, PostgreSQL must run as the postgres user: %w (hack/install-postgres.sh installs the package that creates it)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtest: postgres user: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// command is name from the server's bin directory, run as the server's
// user in its directory, with its output appended to postgres.log (the
// caller closes the returned file once the command has started: the
// child has its own descriptor).
func (s *Server) command(name string, args ...string) (*exec.Cmd, *os.File, error) {
	logf, err := os.OpenFile(filepath.Join(s.dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, fmt.Errorf("pgtest: %w", err)
	}
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group, so a terminal's ^C reaches the test binary
	// first and Stop still runs; SIGQUIT (immediate shutdown) if the
	// test binary dies first. Go sets the parent-death signal after
	// switching user, which would otherwise clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: s.cred, Pdeathsig: syscall.SIGQUIT}
	return cmd, logf, nil
}

func (s *Server) initdb(ctx context.Context) error {
	cmd, logf, err := s.command("initdb", "-D", filepath.Join(s.dir, "data"), "-U", "postgres",
		"--auth=trust", "--encoding=UTF8", "--no-locale", "--no-sync", "--no-instructions")
	if err != nil {
		return err
	}
	defer logf.Close()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtest: initdb: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		<-done
		err = ctx.Err()
	}
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %w\n%s", err, s.logTail())
	}
	// Trust for everyone but the roles of NewPasswordDatabase: the first
	// matching line wins, so these go before initdb's.
	hba := filepath.Join(s.dir, "data", "pg_hba.conf")
	b, err := os.ReadFile(hba)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	pw := "host all +" + passwordGroup + " 127.0.0.1/32 scram-sha-256\nhost all +" + passwordGroup + " ::1/128 scram-sha-256\n"
	if err := os.WriteFile(hba, append([]byte(pw), b...), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// passwordGroup is the role whose members the private server's pg_hba.conf
// makes authenticate by password over TCP (scram-sha-256).
const passwordGroup = "pgtest_password_required"

// start runs postgres on s.port and waits until it accepts connections.
func (s *Server) start(ctx context.Context) error {
	args := []string{"-D", filepath.Join(s.dir, "data"),
		"-p", strconv.Itoa(s.port), "-k", s.dir, "-c", "listen_addresses=127.0.0.1",
		// Tests open many stores, each with a pool and a listener.
		"-c", "max_connections=300"}
	if s.durable {
		args = append(args, "-c", "shared_preload_libraries=pg_stat_statements")
	} else {
		// Throwaway data: durability off, for speed.
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd, logf, err := s.command("postgres", args...)
	if err != nil {
		return err
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal fires when the thread that forked
		// exits, not the process: keep this thread for postgres's life.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(p.done)
		err := cmd.Start()
		logf.Close()
		started <- err
		if p.err = err; err == nil {
			p.err = cmd.Wait()
		}
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
	if err := s.waitReady(ctx, p); err != nil {
		s.kill(p, syscall.SIGQUIT)
		return fmt.Errorf("%w\npostgres log (%s):\n%s", err, filepath.Join(s.dir, "postgres.log"), s.logTail())
	}
	return nil
}

// waitReady polls, until StartTimeout or p exits, for a connection.
func (s *Server) waitReady(ctx context.Context, p *process) error {
	ctx, cancel := context.WithTimeout(ctx, StartTimeout)
	defer cancel()
	for {
		last := s.ping(ctx)
		if last == nil {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("pgtest: postgres exited before accepting connections: %v", p.err)
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not accepting connections within %s: %w", StartTimeout, last)
		case <-time.After(20 * time.Millisecond): // pacing the poll
		}
	}
}

// ping connects to the postgres database once.
func (s *Server) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

// kill signals p and waits for it to exit, killing it after stopTimeout.
func (s *Server) kill(p *process, sig syscall.Signal) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	s.mu.Lock()
	if s.proc == p {
		s.proc = nil
	}
	s.mu.Unlock()
}

// URL returns the URL of database on the server, as its superuser.
func (s *Server) URL(database string) string {
	u := *s.base
	u.Path = "/" + database
	return u.String()
}

// Addr returns the server's "host:port".
func (s *Server) Addr() string { return s.base.Host }

// NewDatabase creates an empty database with a name unique to this call
// and returns its URL; it is dropped (WITH (FORCE), so connections left
// open do not block it) when tb's test ends. Failures are fatal.
func (s *Server) NewDatabase(tb testing.TB) string {
	tb.Helper()
	name := s.dbName(tb.Name())
	if err := s.exec(context.Background(), "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		tb.Fatalf("pgtest: create database %s: %v", name, err)
	}
	tb.Cleanup(func() {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		if err := s.exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Errorf("pgtest: drop database %s: %v", name, err)
		}
	})
	return s.URL(name)
}

// NewPasswordDatabase is NewDatabase owned by a new login role with a
// random password, and returns the URL of that role, password included
// (postgres://role:password@host/db). On a private server the role must
// give it: a wrong or missing password is refused. A server of
// $ATE_TEST_POSTGRES keeps its own pg_hba.conf, which may trust anyone.
// Role and database are dropped when tb's test ends. Failures are fatal.
func (s *Server) NewPasswordDatabase(tb testing.TB) string {
	tb.Helper()
	ctx := context.Background()
	name := s.dbName(tb.Name())
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		tb.Fatal(err)
	}
	password := hex.EncodeToString(raw[:])
	role, group := pgx.Identifier{name}.Sanitize(), pgx.Identifier{passwordGroup}.Sanitize()
	for _, sql := range []string{
		"DO $$ BEGIN CREATE ROLE " + group + " NOLOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
		"CREATE ROLE " + role + " LOGIN PASSWORD '" + password + "' IN ROLE " + group,
		"CREATE DATABASE " + role + " OWNER " + role,
	} {
		if err := s.exec(ctx, sql); err != nil {
			tb.Fatalf("pgtest: password database %s: %v", name, err)
		}
	}
	tb.Cleanup(func() {
		s.mu.Lock()
		stopped := s.stopped
		s.mu.Unlock()
		if stopped {
			return
		}
		for _, sql := range []string{"DROP DATABASE IF EXISTS " + role + " WITH (FORCE)", "DROP ROLE IF EXISTS " + role} {
			if err := s.exec(ctx, sql); err != nil {
				tb.Errorf("pgtest: %s: %v", sql, err)
			}
		}
	})
	u := *s.base
	u.User = url.UserPassword(name, password)
	u.Path = "/" + name
	return u.String()
}

// dbName is a database name for test: lower case, at most 63 bytes (the
// identifier limit), unique by a counter.
func (s *Server) dbName(test string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(test) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	prefix := fmt.Sprintf("t%d_%d_", os.Getpid(), s.dbSeq.Add(1))
	return prefix + tail(b.String(), 63-len(prefix))
}

// tail is the last n bytes of s (the end of a subtest name tells it apart).
func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// exec runs sql on the postgres database.
func (s *Server) exec(ctx context.Context, sql string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, sql)
	return err
}

// Restart shuts the server down as `pg_ctl restart -m fast` does (SIGINT:
// open sessions are ended, then a checkpoint) and starts it again on the
// same port, for fault tests: clients see their connections end and must
// reconnect. Not possible for an external server.
func (s *Server) Restart(ctx context.Context) error {
	if s.external {
		return fmt.Errorf("pgtest: cannot restart the server of $%s", EnvURL)
	}
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		s.kill(p, syscall.SIGINT)
	}
	return s.start(ctx)
}

// Stop ends the server as `pg_ctl stop -m immediate` does (SIGQUIT: the
// data is throwaway, so no checkpoint) and removes its directory. Nothing
// is left running. A no-op for an external server. Safe to call twice.
func (s *Server) Stop() error {
	if s.external {
		return nil
	}
	s.mu.Lock()
	p := s.proc
	s.stopped = true
	s.mu.Unlock()
	if p != nil {
		s.kill(p, syscall.SIGQUIT)
	}
	if s.dir == "" {
		return nil
	}
	return os.RemoveAll(s.dir)
}

// logTail is the end of postgres.log.
func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// freePort returns a TCP port free now, below the kernel's ephemeral
// range (testport).
func freePort() (int, error) {
	p, err := testport.Free(1)
	if err != nil {
		return 0, fmt.Errorf("pgtest: pick a port: %w", err)
	}
	return p[0], nil
}
