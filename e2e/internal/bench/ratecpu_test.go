package bench

import (
	"context"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop/testkit"
)

// TestCPUProbeAttributesSessionsAndProcesses checks the CPU accounting of the
// maxrate step on the real PostgreSQL server: the server process of a session
// opened by this process is found through its client port and charged with
// the CPU of a query it ran, a child process is charged with what it spent,
// and the machine's counters move.
func TestCPUProbeAttributesSessionsAndProcesses(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dbURL := testkit.DatabaseURL(t)
	admin, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.WithoutCancel(ctx))
	client, err := pgx.Connect(ctx, dbURL)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close(context.WithoutCancel(ctx))

	// A child that burns CPU until it is killed, charged to "stock".
	burner := exec.CommandContext(ctx, "sh", "-c", "while :; do :; done")
	if err := burner.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = burner.Process.Kill(); _ = burner.Wait() }()

	probe := &cpuProbe{admin: admin, pids: map[string]int{"stock": burner.Process.Pid}}
	before, err := probe.snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if err := client.QueryRow(ctx, `SELECT count(*) FROM generate_series(1, 5000000)`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // let the child run for some ticks
	after, err := probe.snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	backend := int(client.PgConn().PID())
	if !slices.Contains(after.dbPIDs["pg_bench"], backend) {
		t.Fatalf("pg_bench sessions %v do not hold the client's server process %d", after.dbPIDs["pg_bench"], backend)
	}
	u := probe.use(before, after, 10)
	if u.group["pg_bench"] < 50*time.Millisecond {
		t.Errorf("pg_bench = %s, want the CPU of counting 5M rows (well over 50 ms)", u.group["pg_bench"])
	}
	if u.group["postgres"] < u.group["pg_bench"] {
		t.Errorf("postgres = %s < pg_bench = %s: every server process counts in postgres", u.group["postgres"], u.group["pg_bench"])
	}
	if u.group["stock"] < 50*time.Millisecond {
		t.Errorf("stock (a busy child) = %s, want well over 50 ms", u.group["stock"])
	}
	if got, want := u.perOrder("stock"), float64(u.group["stock"].Microseconds())/1000/10; got != want {
		t.Errorf("perOrder(stock) = %v, want %v", got, want)
	}
	if u.group["shop"] < u.group["stock"]+u.group["postgres"] {
		t.Errorf("shop = %s, want at least stock + postgres = %s", u.group["shop"], u.group["stock"]+u.group["postgres"])
	}
	if !(u.busyCores > 0) || u.idle < 0 || u.idle > 1 || u.elapsed <= 0 {
		t.Errorf("machine: busy %.2f cores, idle %.2f over %s", u.busyCores, u.idle, u.elapsed)
	}
}
