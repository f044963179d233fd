package bench

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// processCPU returns the CPU time (user and system) process pid has used so
// far, in ns: the sum of its threads' run times from
// /proc/<pid>/task/*/schedstat. /proc/<pid>/stat counts in clock ticks of
// 10 ms, too coarse for a relay that works a few ms in a short run. A thread
// that has ended takes its time with it; the processes measured here (Go
// runtimes, PostgreSQL backends, the Erlang VM) keep their threads.
func processCPU(pid int) (time.Duration, error) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task/"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var total time.Duration
	for _, t := range tasks {
		raw, err := os.ReadFile(dir + t.Name() + "/schedstat")
		if err != nil {
			continue // the thread has just ended
		}
		first, _, _ := strings.Cut(string(raw), " ")
		ns, err := strconv.ParseInt(first, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s%s/schedstat: %w", dir, t.Name(), err)
		}
		total += time.Duration(ns)
	}
	return total, nil
}

// selfCPU returns the CPU time this process has used so far.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// backendsCPU returns the CPU time used so far by the server processes of
// every other client session of pool's database (PostgreSQL runs one process
// per connection), which must be on this machine.
func backendsCPU(ctx context.Context, pool *pgxpool.Pool) (time.Duration, error) {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	var total time.Duration
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			return 0, err
		}
		if d, err := processCPU(pid); err == nil { // a session may just have ended
			total += d
		}
	}
	return total, rows.Err()
}
