package testkit

import (
	"context"
	"database/sql"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// defaultMySQLDSN is the local MySQL or MariaDB server (go-sql-driver DSN form).
const defaultMySQLDSN = "root@tcp(127.0.0.1:3306)/"

// MySQLServerDSN returns the DSN of the MySQL or MariaDB test server:
// TEST_MYSQL_DSN or the local default, without a database name. It fails the
// test (never skips) when the server does not answer.
func MySQLServerDSN(t testing.TB) string {
	t.Helper()
	dsn := getenvOr("TEST_MYSQL_DSN", defaultMySQLDSN)
	ctx, cancel := bounded()
	defer cancel()
	db, err := sql.Open("mysql", dsn)
	if err == nil {
		err = db.PingContext(ctx)
		db.Close()
	}
	if err != nil {
		t.Fatalf("testkit: the MySQL/MariaDB server of TEST_MYSQL_DSN (default %s) does not answer: %v", defaultMySQLDSN, err)
	}
	return dsn
}

// NewMySQLDatabase creates a uniquely named database on the MySQL or MariaDB
// test server and drops it when the test ends. It returns an open *sql.DB on it
// (closed at cleanup) and its DSN.
func NewMySQLDatabase(t testing.TB) (*sql.DB, string) {
	t.Helper()
	server := MySQLServerDSN(t)
	cfg, err := mysql.ParseDSN(server)
	if err != nil {
		t.Fatalf("testkit: TEST_MYSQL_DSN: %v", err)
	}
	name := dbName(t)
	ctx, cancel := bounded()
	defer cancel()
	if err := mysqlAdmin(ctx, server, "CREATE DATABASE `"+name+"`"); err != nil {
		t.Fatalf("testkit: create MySQL database %s: %v", name, err)
	}
	cfg.DBName = name
	dsn := cfg.FormatDSN()
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatalf("testkit: open MySQL database %s: %v", name, err)
	}
	t.Cleanup(func() {
		db.Close()
		ctx, cancel := bounded()
		defer cancel()
		if err := mysqlAdmin(ctx, server, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			t.Errorf("testkit: drop MySQL database %s: %v", name, err)
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
