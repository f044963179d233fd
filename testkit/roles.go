package testkit

import (
	"net/url"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"example.com/shop/platform/config"
)

// applied holds the SQL files ApplySQLFile ran, by path, once per test binary.
var applied sync.Map // path -> *sync.Once

// ApplySQLFile runs the SQL script at path (such as deploy/postgres/roles.sql) once per
// test binary on the test server's maintenance database, failing t when it fails.
// The script must be safe to run again and concurrently (other test binaries run it
// too).
func ApplySQLFile(t testing.TB, path string) {
	t.Helper()
	server := DatabaseURL(t)
	once, _ := applied.LoadOrStore(path, new(sync.Once))
	var err error
	ran := false
	once.(*sync.Once).Do(func() {
		ran = true
		var sql []byte
		if sql, err = os.ReadFile(path); err != nil {
			return
		}
		ctx, cancel := bounded()
		defer cancel()
		var conn *pgx.Conn
		if conn, err = pgx.Connect(ctx, server); err != nil {
			return
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, string(sql))
	})
	if ran && err != nil {
		applied.Delete(path)
		t.Fatalf("testkit: apply %s: %v", path, err)
	}
}

// URLAs returns databaseURL with its user set to role and no password, for tests
// that connect as a least-privilege role (the test server trusts local connections).
func URLAs(t testing.TB, databaseURL, role string) string {
	t.Helper()
	u, err := url.Parse(databaseURL)
	if err != nil {
		t.Fatalf("testkit: %s: %v", config.MaskURL(databaseURL), err)
	}
	u.User = url.User(role)
	return u.String()
}
