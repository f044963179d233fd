package fault

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func TestScratchPG(t *testing.T) {
	ctx := context.Background()
	start := time.Now()
	c, err := StartPGCluster(ctx, true)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	t.Logf("started in %v", time.Since(start))
	conn, err := pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE x (a int)"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if err := c.Kill(c.Primary); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, c.URL("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRow(ctx, "INSERT INTO x VALUES (1) RETURNING a").Scan(&n); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover done in %v, port %d", time.Since(start), conn.PgConn().Conn().RemoteAddr())
}
