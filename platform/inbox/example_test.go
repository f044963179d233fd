package inbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/msgkey"
	"example.com/shop/platform/migrate"
	"example.com/shop/platform/pg"
	"example.com/shop/testkit/inboxtest"
)

// db is the database of the examples, on the test server (TEST_DATABASE_URL or the
// local default), migrated with the inbox's migrations plus the wallet and receipt
// tables of the examples; TestMain creates it and drops it.
var db *pgxpool.Pool

const exampleTables = `
CREATE TABLE wallet  (user_id text PRIMARY KEY, cashback numeric(12,2) NOT NULL DEFAULT 0);
CREATE TABLE receipt (user_id text NOT NULL, order_id text NOT NULL);`

func TestMain(m *testing.M) {
	os.Exit(runWithExampleDatabase(m))
}

func runWithExampleDatabase(m *testing.M) int {
	if os.Getenv(inboxtest.RaceWorkerEnv) != "" {
		return m.Run() // a process of the race test, on the database its parent made
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	u, err := url.Parse(server)
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples: TEST_DATABASE_URL:", err)
		return 1
	}
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	name := "inbox_examples_" + hex.EncodeToString(suffix)
	u.Path = "/" + name
	_, err = migrate.Up(ctx, u.String(), testSchema) // creates the database
	if err == nil {
		db, err = pg.NewPool(ctx, u.String())
	}
	if err == nil {
		_, err = db.Exec(ctx, exampleTables)
	}
	defer func() {
		if db != nil {
			db.Close()
		}
		if admin, err := pgx.Connect(context.Background(), server); err == nil {
			_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
			admin.Close(context.Background())
		}
	}()
	if err != nil {
		fmt.Fprintln(os.Stderr, "examples: database:", err)
		return 1
	}
	return m.Run()
}

// credit is the effect of an OrderPaid event on the billing side: it adds the
// cashback to the user's wallet, in the inbox's transaction.
func credit(user, amount string) inbox.Func {
	return func(ctx context.Context, tx pgx.Tx) (any, error) {
		_, err := tx.Exec(ctx, `INSERT INTO wallet (user_id, cashback) VALUES ($1, $2)
ON CONFLICT (user_id) DO UPDATE SET cashback = wallet.cashback + EXCLUDED.cashback`, user, amount)
		return nil, err
	}
}

func wallet(user string) string {
	var v string
	if err := db.QueryRow(context.Background(), `SELECT coalesce(sum(cashback), 0)::text FROM wallet WHERE user_id = $1`, user).Scan(&v); err != nil {
		return err.Error()
	}
	return v
}

// The redelivery story: one OrderPaid event, keyed by the CloudEvents headers the
// relay puts on every AMQP message, delivered the way a broker redelivers it.
func Example_redelivery() {
	ctx := context.Background()
	billing := inbox.NewConsumer(inbox.Config{Name: "billing.cashback"})
	paid := map[string]any{"cloudEvents_id": "0199b1d4-7c1a-7000-8000-000000000001", "cloudEvents_source": "/orders"}
	next := map[string]any{"cloudEvents_id": "0199b1d4-7c1a-7000-8000-000000000002", "cloudEvents_source": "/orders"}
	body := []byte(`{"order_id":"o-1","user_id":"u-1","cashback":"1.90"}`)
	nextBody := []byte(`{"order_id":"o-2","user_id":"u-1","cashback":"1.90"}`)

	step := func(n int, what string, headers map[string]any, content []byte, c *inbox.Consumer, fn inbox.Func) {
		key, err := msgkey.CloudEventsAMQP(headers)
		if err != nil {
			fmt.Println(err)
			return
		}
		out, err := c.Handle(ctx, db, inbox.Message{Key: key, Content: content}, fn)
		result := "applied"
		switch {
		case err != nil:
			result = "failed: rolled back"
		case out.Duplicate:
			result = "duplicate, skipped"
		}
		fmt.Printf("%d. %-38s %-20s wallet %s\n", n, what, result, wallet("u-1"))
	}
	timeout := func(ctx context.Context, tx pgx.Tx) (any, error) {
		if _, err := credit("u-1", "1.90")(ctx, tx); err != nil {
			return nil, err
		}
		return nil, errors.New("payment provider: timeout")
	}
	receipts := inbox.NewConsumer(inbox.Config{Name: "notifications.receipt"})
	sendReceipt := func(ctx context.Context, tx pgx.Tx) (any, error) {
		_, err := tx.Exec(ctx, `INSERT INTO receipt (user_id, order_id) VALUES ('u-1', 'o-1')`)
		return nil, err
	}

	step(1, "OrderPaid arrives", paid, body, billing, credit("u-1", "1.90"))
	step(2, "redelivered after a crash before ack", paid, body, billing, credit("u-1", "1.90"))
	anotherInstance := inbox.NewConsumer(inbox.Config{Name: "billing.cashback"})
	step(3, "another instance gets it", paid, body, anotherInstance, credit("u-1", "1.90"))
	step(4, "next event, the provider times out", next, nextBody, billing, timeout)
	step(5, "that event is redelivered", next, nextBody, billing, credit("u-1", "1.90"))
	step(6, "another consumer of the first event", paid, body, receipts, sendReceipt)
	// Output:
	// 1. OrderPaid arrives                      applied              wallet 1.90
	// 2. redelivered after a crash before ack   duplicate, skipped   wallet 1.90
	// 3. another instance gets it               duplicate, skipped   wallet 1.90
	// 4. next event, the provider times out     failed: rolled back  wallet 1.90
	// 5. that event is redelivered              applied              wallet 3.80
	// 6. another consumer of the first event    applied              wallet 3.80
}

// Handle alone: mode Skip, no content check, no counters.
func ExampleHandle() {
	ctx := context.Background()
	for range 2 {
		out, err := inbox.Handle(ctx, db, "example.handle", "webhook-42", credit("u-handle", "5.00"))
		fmt.Println(out.Duplicate, err, wallet("u-handle"))
	}
	// Output:
	// false <nil> 5.00
	// true <nil> 5.00
}

// Mode Skip: a duplicate is reported in the Outcome, fn is not called.
func ExampleConsumer_Handle_skip() {
	c := inbox.NewConsumer(inbox.Config{Name: "example.skip", Mode: inbox.Skip})
	m := inbox.Message{Key: "m-1", Content: []byte("credit 1.00")}
	for range 2 {
		out, err := c.Handle(context.Background(), db, m, credit("u-skip", "1.00"))
		fmt.Printf("duplicate=%v err=%v wallet=%s\n", out.Duplicate, err, wallet("u-skip"))
	}
	// Output:
	// duplicate=false err=<nil> wallet=1.00
	// duplicate=true err=<nil> wallet=1.00
}

// Mode Fail: a duplicate is an error wrapping ErrDuplicate.
func ExampleConsumer_Handle_fail() {
	c := inbox.NewConsumer(inbox.Config{Name: "example.fail", Mode: inbox.Fail})
	m := inbox.Message{Key: "m-1", Content: []byte("credit 1.00")}
	for range 2 {
		_, err := c.Handle(context.Background(), db, m, credit("u-fail", "1.00"))
		fmt.Printf("duplicate=%v wallet=%s\n", errors.Is(err, inbox.ErrDuplicate), wallet("u-fail"))
	}
	// Output:
	// duplicate=false wallet=1.00
	// duplicate=true wallet=1.00
}

// Mode ReturnStored: a retried request gets the first answer, although the state
// it was computed from has changed since.
func ExampleConsumer_Handle_returnStored() {
	ctx := context.Background()
	c := inbox.NewConsumer(inbox.Config{Name: "example.stored", Mode: inbox.ReturnStored})
	m := inbox.Message{Key: "req-7", Content: []byte(`POST /wallets/u-stored/credit {"amount":"2.00"}`)}
	answer := func(ctx context.Context, tx pgx.Tx) (any, error) {
		if _, err := credit("u-stored", "2.00")(ctx, tx); err != nil {
			return nil, err
		}
		var balance string
		err := tx.QueryRow(ctx, `SELECT cashback::text FROM wallet WHERE user_id = 'u-stored'`).Scan(&balance)
		return map[string]string{"balance": balance}, err
	}
	first, _ := c.Handle(ctx, db, m, answer)
	// The wallet changes after the first answer.
	if _, err := db.Exec(ctx, `UPDATE wallet SET cashback = cashback + 10 WHERE user_id = 'u-stored'`); err != nil {
		fmt.Println(err)
	}
	retry, _ := c.Handle(ctx, db, m, answer)
	fmt.Println(string(first.Result), first.Duplicate)
	fmt.Println(string(retry.Result), retry.Duplicate, "wallet now", wallet("u-stored"))
	// Output:
	// {"balance":"2.00"} false
	// {"balance": "2.00"} true wallet now 12.00
}

// A key reused with another content is a conflict: not applied, and Permanent (a
// consumer dead-letters it at once).
func ExampleConsumer_Handle_conflict() {
	ctx := context.Background()
	c := inbox.NewConsumer(inbox.Config{Name: "example.conflict"})
	_, err := c.Handle(ctx, db, inbox.Message{Key: "m-1", Content: []byte(`{"cashback":"1.90"}`)}, credit("u-conflict", "1.90"))
	fmt.Println(err)
	_, err = c.Handle(ctx, db, inbox.Message{Key: "m-1", Content: []byte(`{"cashback":"19.00"}`)}, credit("u-conflict", "19.00"))
	fmt.Println(errors.Is(err, inbox.ErrConflict), inbox.Permanent(err), wallet("u-conflict"))
	// Output:
	// <nil>
	// true true 1.90
}

// A message without a key is never processed: ErrNoKey, a permanent error.
func ExampleConsumer_Handle_noKey() {
	c := inbox.NewConsumer(inbox.Config{Name: "example.nokey"})
	key, _ := msgkey.AMQPMessageID("") // a message published without message_id
	_, err := c.Handle(context.Background(), db, inbox.Message{Key: key}, credit("u-nokey", "1.00"))
	fmt.Println(errors.Is(err, inbox.ErrNoKey), inbox.Permanent(err), wallet("u-nokey"))
	// Output:
	// true true 0
}
