package watermillinbox_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// schema is processed_event as package inbox documents it, and the wallet the
// examples and tests credit.
const schema = `
CREATE TABLE processed_event (
    consumer       text        NOT NULL,
    message_key    text        NOT NULL CHECK (octet_length(message_key) BETWEEN 1 AND 255),
    payload_sha256 bytea       CHECK (octet_length(payload_sha256) = 32),
    result         jsonb,
    processed_at   timestamptz NOT NULL DEFAULT now(),
    outcome        text        CHECK (outcome = 'dropped'),
    PRIMARY KEY (consumer, message_key)
);
CREATE TABLE wallet (user_id text PRIMARY KEY, cashback numeric(12,2) NOT NULL DEFAULT 0);`

// db is a database of its own on the test server (TEST_DATABASE_URL or the local
// default) with schema, made by TestMain and dropped after the tests; the
// examples use it, each test its own consumer names and users.
var db *pgxpool.Pool

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		server = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	suffix := make([]byte, 5)
	_, _ = rand.Read(suffix)
	name := "watermillinbox_" + hex.EncodeToString(suffix)
	admin, err := pgx.Connect(ctx, server)
	if err != nil {
		fmt.Fprintln(os.Stderr, "watermillinbox tests: PostgreSQL:", err)
		return 1
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		fmt.Fprintln(os.Stderr, "watermillinbox tests:", err)
		return 1
	}
	defer func() {
		if db != nil {
			db.Close()
		}
		_, _ = admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
	}()
	u, err := url.Parse(server)
	if err == nil {
		u.Path = "/" + name
		db, err = pgxpool.New(ctx, u.String())
	}
	if err == nil {
		_, err = db.Exec(ctx, schema)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "watermillinbox tests:", err)
		return 1
	}
	return m.Run()
}

func wallet(ctx context.Context, user string) string {
	var v string
	if err := db.QueryRow(ctx, `SELECT coalesce(sum(cashback), 0)::text FROM wallet WHERE user_id = $1`, user).Scan(&v); err != nil {
		return err.Error()
	}
	return v
}
