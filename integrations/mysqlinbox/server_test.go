package mysqlinbox_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
)

// defaultMySQLDSN is the local MySQL or MariaDB server (go-sql-driver DSN form).
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// newMySQLDatabase creates a uniquely named database on the MySQL or MariaDB test
// server, TEST_MYSQL_DSN or the local default, and drops it when the test ends. It
// returns an open *sql.DB on it (closed at cleanup) and its DSN. It fails the test
// (never skips) when the server does not answer within 2 minutes.
func newMySQLDatabase(t testing.TB) (*sql.DB, string) {
	t.Helper()
	server := os.Getenv("TEST_MYSQL_DSN")
	if server == "" {
		server = defaultMySQLDSN
	}
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("TEST_MYSQL_DSN: %v", err)
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	name := "t_mysqlinbox_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := mysqlAdmin(ctx, server, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("the MySQL/MariaDB server of TEST_MYSQL_DSN (default %s): %v", defaultMySQLDSN, err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("open MySQL database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := mysqlAdmin(ctx, server, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("drop MySQL database %s: %v", name, err)
		}
	})
	return db, dsn
}

// mysqlAdmin runs one statement on the server of dsn.
func mysqlAdmin(ctx context.Context, dsn, stmt string) error {
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, stmt); err != nil {
		return fmt.Errorf("%s: %w", stmt, err)
	}
	return nil
}
