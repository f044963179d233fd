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

// clockTick is the unit of the CPU times in /proc/<pid>/stat (USER_HZ, 100 on
// Linux everywhere).
const clockTick = 10 * time.Millisecond

// processCPU returns the user + system CPU time process pid has used so far,
// from /proc/<pid>/stat.
func processCPU(pid int) (time.Duration, error) {
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; the fields after its closing
	// parenthesis start with field 3 (state). utime and stime are fields 14, 15.
	i := strings.LastIndexByte(string(raw), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(string(raw[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	return time.Duration(ut+st) * clockTick, nil
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
