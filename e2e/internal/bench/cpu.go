package bench

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"
)

// processCPU returns the CPU time (user and system) process pid has used so
// far, in ns, from its CPU-time clock (clock_gettime on the clock id
// clock_getcpuclockid(3) makes for pid). It counts the threads that have
// ended, and is precise where /proc/<pid>/stat counts in clock ticks of 10
// ms, too coarse for a relay that works a few ms in a short run.
func processCPU(pid int) (time.Duration, error) {
	clock := int32(^pid<<3 | 2) // MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, fmt.Errorf("CPU clock of process %d: %w", pid, err)
	}
	return time.Duration(ts.Nano()), nil
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
