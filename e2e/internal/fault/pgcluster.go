package fault

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop/testkit"
)

// PGCluster is a private PostgreSQL primary with one streaming standby, each
// its own server (data directory, port) under one temporary directory, trust
// authentication on 127.0.0.1. Servers run as the postgres user when the
// caller is root (PostgreSQL refuses root).
type PGCluster struct {
	Primary, Standby *PGServer
	bin              string
	dir              string
	cred             *syscall.Credential
	sync             bool
	// Rebuilt holds, for each Rejoin whose pg_rewind failed (and that copied
	// the new primary afresh with pg_basebackup instead), pg_rewind's error.
	Rebuilt []string
}

// PGServer is one server of a PGCluster.
type PGServer struct {
	Port int
	Dir  string // data directory
}

// StartPGCluster initialises a primary, copies it to a standby with
// pg_basebackup and starts both; with sync the primary waits for the standby
// to flush every commit (synchronous_standby_names = '*'), without it
// replication is asynchronous. It returns once the standby streams (as a
// synchronous standby with sync), within 120 s. Stop it with Stop.
func StartPGCluster(ctx context.Context, sync bool) (*PGCluster, error) {
	ctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	defer cancel()
	bins, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(bins) == 0 {
		return nil, errors.New("pg cluster: no /usr/lib/postgresql/*/bin/initdb")
	}
	c := &PGCluster{bin: filepath.Dir(bins[len(bins)-1]), sync: sync}
	var err error
	if c.dir, err = os.MkdirTemp("", "shop-pg-"); err != nil {
		return nil, fmt.Errorf("pg cluster: %w", err)
	}
	if err := c.runAsPostgres(); err != nil {
		c.Stop()
		return nil, err
	}
	p1, err1 := testkit.FreePort()
	p2, err2 := testkit.FreePort()
	if err := errors.Join(err1, err2); err != nil {
		c.Stop()
		return nil, fmt.Errorf("pg cluster: %w", err)
	}
	c.Primary = &PGServer{Port: p1, Dir: filepath.Join(c.dir, "primary")}
	c.Standby = &PGServer{Port: p2, Dir: filepath.Join(c.dir, "standby")}
	standbys := ""
	if sync {
		standbys = "*"
	}
	steps := []func() error{
		func() error {
			return c.run(ctx, "initdb", "-D", c.Primary.Dir, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync")
		},
		func() error {
			// wal_log_hints and wal_keep_size let Failover rewind the old primary
			// (pg_rewind) and stream to it from the new one.
			return c.configure(c.Primary, "wal_level = replica", "max_wal_senders = 4", "max_connections = 200",
				"fsync = off", "synchronous_standby_names = '"+standbys+"'", "wal_log_hints = on", "wal_keep_size = '1GB'")
		},
		func() error { return c.Start(ctx, c.Primary) },
		func() error {
			return c.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(p1), "-U", "postgres",
				"-D", c.Standby.Dir, "-R", "--checkpoint=fast", "--no-sync")
		},
		// Once promoted, the standby has no standby of its own to wait for.
		func() error { return c.configure(c.Standby, "synchronous_standby_names = ''") },
		func() error { return c.Start(ctx, c.Standby) },
		func() error { return c.waitStreaming(ctx, sync) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			c.Stop()
			return nil, fmt.Errorf("pg cluster: %w", err)
		}
	}
	return c, nil
}

// URL returns the multi-host URL of database db on the cluster: primary
// first, standby second, target_session_attrs=read-write, so that a client
// finds whichever server is the primary.
func (c *PGCluster) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?target_session_attrs=read-write&sslmode=disable",
		c.Primary.Port, c.Standby.Port, db)
}

// ServerURL returns the URL of database db on server s alone.
func (s *PGServer) ServerURL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", s.Port, db)
}

// configure appends settings to s's postgresql.conf, after its port and
// socket directory.
func (c *PGCluster) configure(s *PGServer, settings ...string) error {
	f, err := os.OpenFile(filepath.Join(s.Dir, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	lines := append([]string{"port = " + strconv.Itoa(s.Port), "listen_addresses = '127.0.0.1'",
		"unix_socket_directories = '" + c.dir + "'"}, settings...)
	_, err = f.WriteString("\n" + strings.Join(lines, "\n") + "\n")
	return err
}

// Start starts server s (pg_ctl start, waiting until it accepts connections).
func (c *PGCluster) Start(ctx context.Context, s *PGServer) error {
	return c.run(ctx, "pg_ctl", "-D", s.Dir, "-l", s.Dir+".log", "-w", "-t", "60", "start")
}

// Promote makes the standby the primary (pg_ctl promote, waiting until it
// accepts writes).
func (c *PGCluster) Promote(ctx context.Context) error {
	return c.run(ctx, "pg_ctl", "-D", c.Standby.Dir, "-w", "-t", "60", "promote")
}

// Failover kills the primary (Kill), promotes the standby gap later, and makes
// the old primary its standby: CHECKPOINT on the new primary (so that its
// control file names the new timeline), pg_rewind of the old primary's data
// directory from it (-R: standby.signal and primary_conninfo; a fresh
// pg_basebackup instead when pg_rewind fails, kept in Rebuilt), then start and
// wait until it streams. Between the promotion and that moment the new primary
// does not wait for a standby (synchronous_standby_names = ”); once the
// standby streams, a synchronous cluster waits for it again. Primary and
// Standby are swapped. The cluster's URL (URL) finds the new primary unchanged.
// Each step is bounded by 2 minutes; an error names the step.
func (c *PGCluster) Failover(ctx context.Context, gap time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := c.Kill(c.Primary); err != nil {
		return fmt.Errorf("pg failover: kill the primary: %w", err)
	}
	select {
	case <-ctx.Done():
	case <-time.After(gap):
	}
	if err := c.Promote(ctx); err != nil {
		return fmt.Errorf("pg failover: %w", err)
	}
	old := c.Primary
	c.Primary, c.Standby = c.Standby, old
	if err := c.setSync(ctx, ""); err != nil {
		return err
	}
	return c.Rejoin(ctx)
}

// Rejoin rewinds the stopped server Standby from the running Primary and
// starts it as a streaming standby (see Failover).
func (c *PGCluster) Rejoin(ctx context.Context) error {
	if err := c.exec(ctx, c.Primary, "CHECKPOINT"); err != nil {
		return fmt.Errorf("pg rejoin: %w", err)
	}
	if err := c.rewind(ctx); err != nil {
		// As an operator would: a fresh copy of the new primary instead.
		c.Rebuilt = append(c.Rebuilt, err.Error())
		if err := c.rebuild(ctx); err != nil {
			return fmt.Errorf("pg rejoin: pg_rewind failed, and so did pg_basebackup: %w", err)
		}
	}
	// pg_rewind copied the new primary's configuration, its port included.
	if err := c.configure(c.Standby); err != nil {
		return fmt.Errorf("pg rejoin: %w", err)
	}
	if err := c.Start(ctx, c.Standby); err != nil {
		return fmt.Errorf("pg rejoin: %w", err)
	}
	if err := c.waitStreaming(ctx, false); err != nil {
		return fmt.Errorf("pg rejoin: %w", err)
	}
	if !c.sync {
		return nil
	}
	if err := c.setSync(ctx, "*"); err != nil {
		return err
	}
	if err := c.waitStreaming(ctx, true); err != nil {
		return fmt.Errorf("pg rejoin: %w", err)
	}
	return nil
}

// rewind runs pg_rewind of Standby's data directory from Primary, once the
// processes of the killed server are gone. pg_rewind first completes the
// target's crash recovery in single-user mode; when that fails (seen in a
// soak of `make chaos TOPOLOGY=cluster`), the crash recovery is run again here
// and pg_rewind once more, up to three times, a second apart.
func (c *PGCluster) rewind(ctx context.Context) error {
	if pid, err := c.Standby.pid(); err == nil {
		for alive(pid) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	var errs []error
	for range 3 {
		err := c.run(ctx, "pg_rewind", "-D", c.Standby.Dir, "-R", "--no-sync",
			"--source-server", fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres", c.Primary.Port))
		if err == nil {
			return nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
		time.Sleep(time.Second)
		if err := c.singleUser(ctx, c.Standby); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// rebuild replaces Standby's data directory with a fresh pg_basebackup of
// Primary (-R: standby.signal and primary_conninfo).
func (c *PGCluster) rebuild(ctx context.Context) error {
	if err := os.RemoveAll(c.Standby.Dir); err != nil {
		return err
	}
	return c.run(ctx, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(c.Primary.Port), "-U", "postgres",
		"-D", c.Standby.Dir, "-R", "--checkpoint=fast", "--no-sync")
}

// singleUser runs server s's crash recovery in single-user mode (postgres
// --single, its input empty), which ends with a shutdown checkpoint.
func (c *PGCluster) singleUser(ctx context.Context, s *PGServer) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, "postgres"), "--single", "-F", "-D", s.Dir, "template1")
	cmd.Dir = c.dir
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("postgres --single -D %s: %w: %s", s.Dir, err, out)
	}
	return nil
}

// alive reports whether process pid exists and is not a zombie.
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	_, rest, ok := strings.Cut(string(stat), ") ")
	return ok && !strings.HasPrefix(rest, "Z")
}

// Restart stops server s (pg_ctl stop, -m immediate: as a crash, else -m
// fast) and starts it again, within 2 minutes.
func (c *PGCluster) Restart(ctx context.Context, s *PGServer, immediate bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	mode := "fast"
	if immediate {
		mode = "immediate"
	}
	if err := c.run(ctx, "pg_ctl", "-D", s.Dir, "-m", mode, "-w", "-t", "60", "stop"); err != nil {
		return err
	}
	return c.Start(ctx, s)
}

// Healthy returns nil once the primary sees its standby streaming (as a
// synchronous standby when the cluster is synchronous), within timeout.
func (c *PGCluster) Healthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	return c.waitStreaming(ctx, c.sync)
}

// setSync sets synchronous_standby_names on the primary (ALTER SYSTEM, reload).
func (c *PGCluster) setSync(ctx context.Context, names string) error {
	if err := c.exec(ctx, c.Primary, "ALTER SYSTEM SET synchronous_standby_names = '"+names+"'", "SELECT pg_reload_conf()"); err != nil {
		return fmt.Errorf("pg cluster: synchronous_standby_names = '%s': %w", names, err)
	}
	return nil
}

// exec runs each statement on server s's postgres database.
func (c *PGCluster) exec(ctx context.Context, s *PGServer, stmts ...string) error {
	conn, err := pgx.Connect(ctx, s.ServerURL("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for _, stmt := range stmts {
		if _, err := conn.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	return nil
}

// Kill sends SIGKILL to s's postmaster and every process it started, as the
// loss of its machine would end them: nothing is flushed or sent after.
func (c *PGCluster) Kill(s *PGServer) error {
	pid, err := s.pid()
	if err != nil {
		return err
	}
	// Stopped first, the postmaster forks nothing after its children are found
	// (killed first, its children would be orphans, no longer found by parent).
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	for _, child := range children(pid) {
		_ = syscall.Kill(child, syscall.SIGKILL)
	}
	return syscall.Kill(pid, syscall.SIGKILL)
}

// Detach stops the standby's replication (primary_conninfo emptied, its WAL
// receiver gone), so that later commits on an asynchronous primary never
// reach it, as with a standby lagging behind when the primary fails.
func (c *PGCluster) Detach(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.Standby.ServerURL("postgres"))
	if err != nil {
		return fmt.Errorf("pg cluster: detach: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, `ALTER SYSTEM SET primary_conninfo = ''`); err != nil {
		return fmt.Errorf("pg cluster: detach: %w", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
		return fmt.Errorf("pg cluster: detach: %w", err)
	}
	for {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_wal_receiver`).Scan(&n); err != nil {
			return fmt.Errorf("pg cluster: detach: %w", err)
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pg cluster: detach: the WAL receiver still runs: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop stops both servers at once (pg_ctl stop -m immediate) and removes
// the cluster's directory. It is safe to call more than once.
func (c *PGCluster) Stop() {
	for _, s := range []*PGServer{c.Primary, c.Standby} {
		if s == nil {
			continue
		}
		if _, err := s.pid(); err == nil {
			_ = c.run(context.Background(), "pg_ctl", "-D", s.Dir, "-m", "immediate", "-w", "stop")
		}
	}
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// waitStreaming waits until the primary sees its standby streaming, as a
// synchronous standby when sync.
func (c *PGCluster) waitStreaming(ctx context.Context, sync bool) error {
	want := "async"
	if sync {
		want = "sync"
	}
	for {
		var n int
		conn, err := pgx.Connect(ctx, c.Primary.ServerURL("postgres"))
		if err == nil {
			err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming' AND sync_state = $1`, want).Scan(&n)
			conn.Close(context.WithoutCancel(ctx))
		}
		if err == nil && n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("standby not streaming (%s): %w", want, errors.Join(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// runAsPostgres makes the servers run as the postgres user when the caller
// is root, and gives that user the cluster's directory.
func (c *PGCluster) runAsPostgres() error {
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return fmt.Errorf("pg cluster: running as root needs a postgres user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	return os.Chown(c.dir, uid, gid)
}

// run runs one of the server's programs as the servers' user and returns
// its output in the error when it fails.
func (c *PGCluster) run(ctx context.Context, program string, args ...string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, program), args...)
	cmd.Dir = c.dir
	cmd.Env = append(os.Environ(), "PGHOST="+c.dir)
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s %s: %w: %s", program, strings.Join(args, " "), err, out)
	}
	return nil
}

// pid returns the postmaster's process id from s's postmaster.pid.
func (s *PGServer) pid() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "postmaster.pid"))
	if err != nil {
		return 0, fmt.Errorf("pg server on %d: not running: %w", s.Port, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	return strconv.Atoi(strings.TrimSpace(first))
}

// children returns the processes whose parent is pid.
func children(pid int) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", child))
		if err != nil {
			continue
		}
		// Fields after the command, which is in parentheses: state, ppid, ...
		_, rest, ok := strings.Cut(string(stat), ") ")
		if f := strings.Fields(rest); ok && len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}
