package mysqlinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"example.com/shop/integrations/mysqlinbox"
	"example.com/shop/platform/inbox"
	"example.com/shop/platform/inbox/msgkey"
	"example.com/shop/testkit/inboxtest"
)

// exampleDB is the examples' database on the test server (TEST_MYSQL_DSN or the
// local default), migrated, with a wallet table; TestMain creates and drops it.
var exampleDB *sql.DB

func TestMain(m *testing.M) { os.Exit(runWithExampleDatabase(m)) }

func runWithExampleDatabase(m *testing.M) int {
	if os.Getenv(inboxtest.RaceWorkerEnv) != "" {
		return m.Run() // a process of the race test, on the database its parent made
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := os.Getenv("TEST_MYSQL_DSN")
	if server == "" {
		server = "root@tcp(127.0.0.1:3306)/"
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysqlinbox tests: TEST_MYSQL_DSN:", err)
		return 1
	}
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	cfg.DBName = "mysqlinbox_examples_" + hex.EncodeToString(suffix)
	admin, err := sql.Open("mysql", server)
	if err == nil {
		_, err = admin.ExecContext(ctx, "CREATE DATABASE "+cfg.DBName)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "mysqlinbox tests need a MySQL/MariaDB server (TEST_MYSQL_DSN, here %s): %v\n", server, err)
		return 1
	}
	defer func() {
		_, _ = admin.ExecContext(context.Background(), "DROP DATABASE IF EXISTS "+cfg.DBName)
		admin.Close()
	}()
	exampleDB, err = sql.Open("mysql", cfg.FormatDSN())
	if err == nil {
		defer exampleDB.Close()
		err = mysqlinbox.Migrate(ctx, exampleDB)
	}
	if err == nil {
		_, err = exampleDB.ExecContext(ctx, `CREATE TABLE wallet (user_id varchar(64) PRIMARY KEY, cashback decimal(12,2) NOT NULL)`)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mysqlinbox tests: the examples' database:", err)
		return 1
	}
	return m.Run()
}

// One OrderPaid event on MySQL, delivered the way a broker redelivers it: applied
// once, skipped as a copy, failed and rolled back, then applied on its next
// delivery.
func ExampleNewConsumer() {
	ctx := context.Background()
	billing := mysqlinbox.NewConsumer(inbox.Config{Name: "billing.cashback"})
	credit := func(fail bool) inbox.TxFunc[*sql.Tx] {
		return func(ctx context.Context, tx *sql.Tx) (any, error) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO wallet (user_id, cashback) VALUES ('u-1', 1.90)
ON DUPLICATE KEY UPDATE cashback = cashback + 1.90`); err != nil {
				return nil, err
			}
			if fail {
				return nil, errors.New("provider timed out")
			}
			return nil, nil
		}
	}
	wallet := func() string {
		var v string
		if err := exampleDB.QueryRowContext(ctx, `SELECT COALESCE(SUM(cashback), 0) FROM wallet WHERE user_id = 'u-1'`).Scan(&v); err != nil {
			return err.Error()
		}
		return v
	}
	steps := []struct {
		what, id string
		fail     bool
	}{
		{"OrderPaid arrives", "0199b1d4-0001", false},
		{"redelivered after a lost ack", "0199b1d4-0001", false},
		{"next event, the provider times out", "0199b1d4-0002", true},
		{"that event redelivered", "0199b1d4-0002", false},
	}
	for _, s := range steps {
		key, err := msgkey.CloudEventsAMQP(map[string]any{"cloudEvents_id": s.id, "cloudEvents_source": "/orders"})
		if err != nil {
			fmt.Println(err)
			return
		}
		out, err := billing.Handle(ctx, exampleDB, inbox.Message{Key: key}, credit(s.fail))
		result := "applied"
		switch {
		case err != nil:
			result = "failed: rolled back"
		case out.Duplicate:
			result = "duplicate, skipped"
		}
		fmt.Printf("%-36s %-20s wallet %s\n", s.what, result, wallet())
	}
	// Output:
	// OrderPaid arrives                    applied              wallet 1.90
	// redelivered after a lost ack         duplicate, skipped   wallet 1.90
	// next event, the provider times out   failed: rolled back  wallet 1.90
	// that event redelivered               applied              wallet 3.80
}

// A joined transaction: the caller's own write and the key commit together;
// Handle works behind a savepoint, so a failing handler leaves the caller's
// transaction usable.
func ExampleStore_InTx_joined() {
	ctx := context.Background()
	c := mysqlinbox.NewConsumer(inbox.Config{Name: "joined"})
	tx, err := exampleDB.BeginTx(ctx, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after the commit
	_, err = c.Handle(ctx, tx, inbox.Message{Key: "k-1"}, func(ctx context.Context, tx *sql.Tx) (any, error) {
		return nil, errors.New("refused")
	})
	fmt.Println("first try:", err)
	out, err := c.Handle(ctx, tx, inbox.Message{Key: "k-1"}, func(ctx context.Context, tx *sql.Tx) (any, error) {
		_, err := tx.ExecContext(ctx, `INSERT INTO wallet (user_id, cashback) VALUES ('u-joined', 5)`)
		return nil, err
	})
	fmt.Println("second try:", out.Duplicate, err)
	fmt.Println("commit:", tx.Commit())
	// Output:
	// first try: inbox joined: key "k-1": refused
	// second try: false <nil>
	// commit: <nil>
}
