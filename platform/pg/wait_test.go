package pg_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/pg"
	"example.com/shop/testkit"
)

// TestWaitPoolWaitsForTheDatabase starts WaitPool on a database that does not
// exist yet, creates it after the first failed attempt and expects the pool once
// it answers.
func TestWaitPoolWaitsForTheDatabase(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t)
	logger, logs := testkit.Logger(t)
	ctx := testkit.Context(t)
	created := make(chan error, 1)
	go func() {
		// Create the database once WaitPool has failed at least once.
		for !strings.Contains(logs.String(), "database not answering") && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
		}
		created <- pg.EnsureDatabase(ctx, url)
	}()
	pool, err := pg.WaitPool(ctx, url, logger)
	if err != nil {
		t.Fatalf("WaitPool: %v", err)
	}
	t.Cleanup(pool.Close)
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	if err := pool.Ping(ctx); err != nil {
		t.Fatalf("ping after WaitPool: %v", err)
	}
	if !strings.Contains(logs.String(), `"level":"WARN","msg":"database not answering, retrying"`) ||
		!strings.Contains(logs.String(), `"msg":"database answered"`) {
		t.Errorf("want a WARN line per failed attempt and one when it answered:\n%s", logs)
	}
}

// TestWaitPoolGivesUpWhenContextEnds: on a closed port WaitPool keeps trying
// until ctx ends, logs every attempt without the password and returns ctx's
// error.
func TestWaitPoolGivesUpWhenContextEnds(t *testing.T) {
	t.Parallel()
	logger, logs := testkit.Logger(t)
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	pool, err := pg.WaitPool(ctx, "postgres://postgres:secret@127.0.0.1:1/none?sslmode=disable", logger)
	if pool != nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitPool = %v, %v; want an error wrapping context.DeadlineExceeded", pool, err)
	}
	if strings.Contains(err.Error(), "secret") || strings.Contains(logs.String(), "secret") {
		t.Errorf("the password shows in %v or the logs", err)
	}
	if n := strings.Count(logs.String(), "database not answering"); n < 2 {
		t.Errorf("%d WARN lines in 1.5 s, want several:\n%s", n, logs)
	}
}

func TestWaitPoolRefusesABadURL(t *testing.T) {
	t.Parallel()
	if _, err := pg.WaitPool(context.Background(), "postgres://%zz", nil); err == nil {
		t.Fatal("WaitPool accepted an unparseable URL")
	}
}

// TestRetryReturnsOtherErrorsAtOnce: only connection failures are retried.
func TestRetryReturnsOtherErrorsAtOnce(t *testing.T) {
	t.Parallel()
	boom := errors.New("boom")
	calls := 0
	err := pg.Retry(context.Background(), testkit.DatabaseURL(t), nil, func(context.Context) error {
		calls++
		return boom
	})
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Retry = %v after %d calls, want boom after 1", err, calls)
	}
}

// TestWaitPoolNamesTheCommandThatCreatesTheDatabase: against a database that does
// not exist, then one without its tables, WaitPool keeps waiting and every WARN
// line says which command creates them; once the table exists it returns the pool.
func TestWaitPoolNamesTheCommandThatCreatesTheDatabase(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t)
	logger, logs := testkit.Logger(t)
	ctx := testkit.Context(t)
	waitFor := func(want string) {
		t.Helper()
		for !strings.Contains(logs.String(), want) {
			if ctx.Err() != nil {
				t.Errorf("logs never said %s:\n%s", want, logs)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	type result struct {
		pool *pgxpool.Pool
		err  error
	}
	done := make(chan result, 1)
	go func() {
		p, err := pg.WaitPool(ctx, url, logger, pg.CreatedBy("order migrate"), pg.RequireTables("widget", "public.gadget"))
		done <- result{p, err}
	}()

	waitFor("does not exist: run `order migrate`")
	waitFor(`"hint":"run ` + "`order migrate`" + `"`)
	if err := pg.EnsureDatabase(ctx, url); err != nil {
		t.Fatal(err)
	}
	waitFor("lacks the tables widget, public.gadget: run `order migrate`")
	pool, err := pg.NewPool(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE widget (id int)`); err != nil {
		t.Fatal(err)
	}
	waitFor("lacks the tables public.gadget: run")
	if _, err := pool.Exec(ctx, `CREATE TABLE gadget (id int)`); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatalf("WaitPool: %v", r.err)
	}
	r.pool.Close()
}

// TestWaitPoolErrorCarriesTheHint: when ctx ends while the database is missing,
// the error says what to run, even when ctx ends in the middle of an attempt.
func TestWaitPoolErrorCarriesTheHint(t *testing.T) {
	t.Parallel()
	url := testkit.EmptyDatabaseURL(t)
	logger, logs := testkit.Logger(t)
	ctx, cancel := context.WithCancel(testkit.Context(t))
	defer cancel()
	go func() {
		// End ctx once an attempt has seen the missing database.
		for !strings.Contains(logs.String(), "does not exist: run `stock migrate`") && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	_, err := pg.WaitPool(ctx, url, logger, pg.CreatedBy("stock migrate"))
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "does not exist: run `stock migrate`") {
		t.Fatalf("WaitPool = %v, want ctx's error naming `stock migrate`", err)
	}
}
