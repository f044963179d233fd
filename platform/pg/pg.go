// Package pg opens PostgreSQL connection pools and runs work in transactions.
package pg

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/backoff"
	"example.com/shop/platform/config"
)

// TxBeginner starts transactions; *pgxpool.Pool, *pgx.Conn and pgx.Tx (as a
// savepoint) satisfy it.
type TxBeginner interface {
	BeginTx(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
}

// URLFromEnv returns the PostgreSQL URL (or key=value DSN) in key, def when it is
// unset, and records a *config.VarError on env for a value pgx cannot parse, so that a
// binary refuses it with its other configuration errors, before it starts anything.
// The recorded message masks a password.
func URLFromEnv(env *config.Env, key, def string) string {
	raw := env.String(key, def)
	if _, err := pgconn.ParseConfig(raw); err != nil {
		why := "it cannot be parsed"
		if inner := errors.Unwrap(err); inner != nil {
			why = inner.Error()
		}
		env.Errorf(key, "%q is not a PostgreSQL URL such as postgres://user@host:5432/db (%s)", config.MaskURL(raw), why)
	}
	return raw
}

// CloseTimeout bounds Close: how long a process that stops waits for its
// pool's connections to close.
const CloseTimeout = 2 * time.Second

// Close closes pool (nil: nothing) and waits for it at most CloseTimeout.
// pgxpool's own Close waits until every connection is closed, and a
// connection that was cancelled mid-query first sends the server a cancel
// request that can wait 15 s on a server that does not answer; a process
// that stops must not wait for that (its grace period is shorter). What is
// left of the pool is closed in the background, and with the process. It
// returns whether the pool closed in time.
func Close(pool *pgxpool.Pool) bool {
	if pool == nil {
		return true
	}
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	t := time.NewTimer(CloseTimeout)
	defer t.Stop()
	select {
	case <-done:
		return true
	case <-t.C:
		return false
	}
}

// NewPool parses databaseURL (a postgres:// URL or a key=value DSN), opens a
// pool and pings the server once. It returns an error naming the database
// when the URL is invalid or the server does not answer before ctx ends.
// Pool sizing follows pgxpool's URL parameters (pool_max_conns, ...).
func NewPool(ctx context.Context, databaseURL string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool for database %q: %w", cfg.ConnConfig.Database, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("ping database %q: %w", cfg.ConnConfig.Database, err)
	}
	return pool, nil
}

// Backoff of WaitPool and Retry between failed attempts (package backoff): the
// nominal delay starts at MinBackoff and doubles up to MaxBackoff, each one drawn
// within ±50% of it so that restarted services do not retry in step.
// AttemptTimeout bounds one ping of WaitPool, so that an address that drops
// packets is retried and logged too.
const (
	MinBackoff     = 100 * time.Millisecond
	MaxBackoff     = 5 * time.Second
	AttemptTimeout = 10 * time.Second
)

// WaitOption adds to what WaitPool waits for.
type WaitOption func(*waitConfig)

type waitConfig struct {
	createdBy string
	tables    []string
}

// CreatedBy names the command that creates the database and its tables, such as
// "order migrate". While the database does not exist (SQLSTATE 3D000) or a table of
// RequireTables is missing, WaitPool's WARN lines carry hint="run `order migrate`"
// and its errors end with it.
func CreatedBy(command string) WaitOption {
	return func(c *waitConfig) { c.createdBy = command }
}

// RequireTables makes WaitPool also wait until every named table exists (looked up
// with to_regclass in the connection's search path, which needs no privilege on the
// table), so that a process started on a database that is not migrated yet says so
// instead of failing its first request.
func RequireTables(names ...string) WaitOption {
	return func(c *waitConfig) { c.tables = append(c.tables, names...) }
}

// WaitPool opens a pool as NewPool does but waits for the database instead of
// failing at once: it pings until the server answers (and, with RequireTables,
// until the tables exist), logging each failed attempt at WARN ("database not
// answering, retrying") with the masked URL, the error and, with CreatedBy, the
// command that creates what is missing; it sleeps with the backoff of Retry in
// between. Every ping error is retried, a missing database or refused login too,
// since another process may be about to fix it. It returns an error at once when
// the URL is invalid, and an error wrapping ctx.Err() (and naming the last
// error) when ctx ends first. Long-running commands use it at start-up;
// one-shot commands use NewPool. A nil logger discards logs.
func WaitPool(ctx context.Context, databaseURL string, logger *slog.Logger, opts ...WaitOption) (*pgxpool.Pool, error) {
	var wc waitConfig
	for _, o := range opts {
		o(&wc)
	}
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open pool for database %q: %w", cfg.ConnConfig.Database, err)
	}
	name := cfg.ConnConfig.Database
	err = Retry(ctx, databaseURL, logger, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, AttemptTimeout)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "3D000" {
				err = fmt.Errorf("database %q does not exist", name)
				return &retryable{err: err, hint: wc.hint()}
			}
			return &retryable{err: fmt.Errorf("ping database %q: %w", name, err)}
		}
		if len(wc.tables) == 0 {
			return nil
		}
		missing, err := missingTables(ctx, pool, wc.tables)
		if err != nil {
			return &retryable{err: fmt.Errorf("look up tables in database %q: %w", name, err)}
		}
		if len(missing) > 0 {
			err := fmt.Errorf("database %q lacks the tables %s", name, strings.Join(missing, ", "))
			return &retryable{err: err, hint: wc.hint()}
		}
		return nil
	})
	if err != nil {
		pool.Close()
		return nil, err
	}
	return pool, nil
}

// hint is what to run to create the database, or "" when CreatedBy was not given.
func (c waitConfig) hint() string {
	if c.createdBy == "" {
		return ""
	}
	return "run `" + c.createdBy + "`"
}

// missingTables returns those of names that do not exist, in their order.
func missingTables(ctx context.Context, pool *pgxpool.Pool, names []string) ([]string, error) {
	rows, err := pool.Query(ctx,
		`SELECT name FROM unnest($1::text[]) WITH ORDINALITY AS t(name, i) WHERE to_regclass(name) IS NULL ORDER BY i`, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// Retry calls fn until it succeeds, while it fails to connect to the
// database of databaseURL. An error of fn that wraps a *pgconn.ConnectError
// (the server did not answer, or refused the connection) is logged at WARN
// with the masked databaseURL and retried after a delay of package backoff
// (MinBackoff doubling to MaxBackoff); any other error is returned at once.
// When ctx ends first, Retry returns an error wrapping ctx.Err() that names the
// last error of an attempt that was not cut short by ctx's end (the one that
// says what is wrong, such as a missing database). A nil logger discards logs.
func Retry(ctx context.Context, databaseURL string, logger *slog.Logger, fn func(ctx context.Context) error) error {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	masked := config.MaskURL(databaseURL)
	b := backoff.New(MinBackoff, MaxBackoff)
	var last error // the last error of an attempt that ctx's end did not cut short
	for attempt := 1; ; attempt++ {
		err := fn(ctx)
		if err == nil {
			if attempt > 1 {
				logger.InfoContext(ctx, "database answered", slog.String("database", masked), slog.Int("attempts", attempt))
			}
			return nil
		}
		if ctx.Err() != nil {
			if last == nil {
				last = err
			}
			return fmt.Errorf("wait for database %s: %w (last error: %v)", masked, ctx.Err(), last)
		}
		last = err
		var connErr *pgconn.ConnectError
		var r *retryable
		if !errors.As(err, &connErr) && !errors.As(err, &r) {
			return err
		}
		wait := b.NextBackOff()
		attrs := []slog.Attr{slog.String("database", masked), slog.Int("attempt", attempt),
			slog.Duration("retry_in", wait), slog.Any("error", err)}
		if r != nil && r.hint != "" {
			attrs = append(attrs, slog.String("hint", r.hint))
		}
		logger.LogAttrs(ctx, slog.LevelWarn, "database not answering, retrying", attrs...)
		if backoff.Sleep(ctx, wait) != nil {
			return fmt.Errorf("wait for database %s: %w (last error: %v)", masked, ctx.Err(), err)
		}
	}
}

// retryable marks an error that Retry retries whatever it wraps; hint, when not
// empty, says what to run to fix it and ends the message.
type retryable struct {
	err  error
	hint string
}

func (r *retryable) Error() string {
	if r.hint != "" {
		return r.err.Error() + ": " + r.hint
	}
	return r.err.Error()
}
func (r *retryable) Unwrap() error { return r.err }

// WithTx runs fn inside one READ COMMITTED transaction begun on db.
//
// It commits when fn returns nil and returns the commit error, if any. It
// rolls back when fn returns an error and returns that error, joined with the
// rollback error when the rollback fails too. When fn panics it rolls back and
// re-panics. The connection always goes back to the pool. fn must not commit
// or roll back the transaction itself.
func WithTx(ctx context.Context, db TxBeginner, fn func(tx pgx.Tx) error) (err error) {
	tx, err := db.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.ReadCommitted})
	if err != nil {
		return fmt.Errorf("begin transaction: %w", err)
	}
	defer func() {
		if p := recover(); p != nil {
			// A fresh context: the caller's may be the reason for the panic.
			_ = tx.Rollback(context.WithoutCancel(ctx))
			panic(p)
		}
	}()
	if err := fn(tx); err != nil {
		if rbErr := tx.Rollback(context.WithoutCancel(ctx)); rbErr != nil && !errors.Is(rbErr, pgx.ErrTxClosed) {
			return errors.Join(err, fmt.Errorf("rollback: %w", rbErr))
		}
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// EnsureDatabase creates the database named in databaseURL when it does not
// exist yet. It connects to the server's "postgres" database with the same
// credentials to do so. Two concurrent callers are safe: the loser of the
// CREATE DATABASE race sees SQLSTATE 42P04 (or a unique violation on
// pg_database) and treats it as success.
func EnsureDatabase(ctx context.Context, databaseURL string) error {
	cfg, err := ConnConfig(databaseURL)
	if err != nil {
		return err
	}
	name := cfg.Database
	if name == "" {
		return errors.New("database url names no database")
	}
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to create database %q: %w", name, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))

	var exists bool
	if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists); err != nil {
		return fmt.Errorf("look up database %q: %w", name, err)
	}
	if exists {
		return nil
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "42P04" || pgErr.Code == "23505") {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %q: %w", name, err)
	}
	return nil
}

// ConnConfig parses databaseURL for a single connection. Pool settings that
// NewPool understands (pool_max_conns, pool_min_conns, ...) are accepted and
// dropped, so one URL serves the pool, EnsureDatabase and migrations alike.
// It returns an error when the URL cannot be parsed.
func ConnConfig(databaseURL string) (*pgx.ConnConfig, error) {
	cfg, err := pgxpool.ParseConfig(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	return cfg.ConnConfig, nil
}

// WithPoolSize returns the postgres:// (or postgresql://) URL raw with
// pool_max_conns=n added when it does not set pool_max_conns itself, so a pool
// has a connection for each of n concurrent users. Other forms (key/value
// strings) and unparseable values are returned unchanged. Only pgxpool
// understands the parameter: give the result to NewPool or WaitPool, never to
// a plain connection, whose server refuses it.
func WithPoolSize(raw string, n int) string {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return raw
	}
	q := u.Query()
	if q.Has("pool_max_conns") {
		return raw
	}
	q.Set("pool_max_conns", strconv.Itoa(n))
	u.RawQuery = q.Encode()
	return u.String()
}
