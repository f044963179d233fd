package bench

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// CPU groups of one latency run, in report order: the bench's own process
// (load generator, reservation and confirmation watchers), the five processes
// of the shop (order's and stock's relays named relay and stock_relay), the
// PostgreSQL server processes that serve each of them (one per connection,
// told apart by the client's TCP port), every PostgreSQL process of the
// server (those above, the background writers and any other database's
// sessions), the RabbitMQ node, and "shop": the sum of the bench, the shop's
// processes, all of PostgreSQL and RabbitMQ.
var cpuGroups = []string{"bench", "order_api", "relay", "stock", "stock_relay", "shipping",
	"pg_bench", "pg_order_api", "pg_relay", "pg_stock", "pg_stock_relay", "pg_shipping", "postgres", "rabbitmq", "shop"}

// cpuProbe names the processes of one run whose CPU time is recorded.
type cpuProbe struct {
	admin *pgx.Conn      // any database of the server, to list the sessions
	pids  map[string]int // group -> pid of a shop process
}

// cpuSnapshot is what a cpuProbe read at one instant.
type cpuSnapshot struct {
	at      time.Time
	self    time.Duration
	procs   map[int]procInfo // every process of the machine
	dbPIDs  map[string][]int // pg_<group> -> server processes of the group's sessions
	machine machineTicks
}

type procInfo struct {
	comm string
	cpu  time.Duration // user + system
}

// machineTicks are the CPU counters of /proc/stat's first line, in clock ticks.
type machineTicks struct{ idle, steal, total uint64 }

// cpuUse is the CPU a run used between two snapshots.
type cpuUse struct {
	elapsed time.Duration
	orders  int
	group   map[string]time.Duration // by cpuGroups
	// busyCores is the machine's busy share times its CPUs (all processes,
	// also those of other work on the machine); idle is the idle share
	// (idle + iowait) and steal the share the hypervisor took, 0..1.
	busyCores, idle, steal float64
}

// perOrder returns group's CPU per order in ms.
func (u cpuUse) perOrder(group string) float64 {
	if u.orders == 0 {
		return 0
	}
	return float64(u.group[group].Microseconds()) / 1000 / float64(u.orders)
}

// cores returns group's CPU time divided by the elapsed time: how many of the
// machine's CPUs it kept busy on average.
func (u cpuUse) cores(group string) float64 {
	if u.elapsed <= 0 {
		return 0
	}
	return u.group[group].Seconds() / u.elapsed.Seconds()
}

// String is one line per run: CPU ms per order by group, and what the shop
// and the whole machine kept busy.
func (u cpuUse) String() string {
	var b strings.Builder
	b.WriteString("CPU ms/order:")
	for _, g := range cpuGroups {
		fmt.Fprintf(&b, " %s %.2f", g, u.perOrder(g))
	}
	fmt.Fprintf(&b, "; shop %.2f cores, machine %.2f of %d cores busy (idle %.0f%%, steal %.0f%%) over %s",
		u.cores("shop"), u.busyCores, runtime.NumCPU(), 100*u.idle, 100*u.steal, u.elapsed.Round(100*time.Millisecond))
	return b.String()
}

// snapshot reads the CPU time of every process of the machine, the sessions
// of the probe's databases and the machine's counters.
func (p *cpuProbe) snapshot(ctx context.Context) (cpuSnapshot, error) {
	s := cpuSnapshot{at: time.Now(), self: selfCPU(), dbPIDs: map[string][]int{}}
	var err error
	if s.machine, err = readMachineTicks(); err != nil {
		return s, err
	}
	if s.procs, err = readProcs(); err != nil {
		return s, err
	}
	// A session's server process serves the client whose socket has the
	// session's client port.
	owner := map[int]string{} // local TCP port -> group of its process
	clients := map[string]int{"bench": os.Getpid()}
	for g, pid := range p.pids {
		clients[g] = pid
	}
	ports, err := localPorts()
	if err != nil {
		return s, err
	}
	for g, pid := range clients {
		for _, inode := range socketInodes(pid) {
			if port, ok := ports[inode]; ok {
				owner[port] = "pg_" + g
			}
		}
	}
	rows, err := p.admin.Query(ctx, `SELECT pid, client_port FROM pg_stat_activity WHERE client_port > 0`)
	if err != nil {
		return s, err
	}
	var pid, port int
	_, err = pgx.ForEachRow(rows, []any{&pid, &port}, func() error {
		if g, ok := owner[port]; ok {
			s.dbPIDs[g] = append(s.dbPIDs[g], pid)
		}
		return nil
	})
	if err != nil {
		return s, err
	}
	return s, nil
}

// use returns the CPU used from a to b for orders orders. A process that
// started in between counts from zero; one that ended in between is lost
// (the shop's processes and their pools' sessions live through a run).
func (p *cpuProbe) use(a, b cpuSnapshot, orders int) cpuUse {
	u := cpuUse{elapsed: b.at.Sub(a.at), orders: orders, group: map[string]time.Duration{}}
	delta := func(pid int) time.Duration {
		end, ok := b.procs[pid]
		if !ok {
			return 0
		}
		if start, ok := a.procs[pid]; ok && start.comm == end.comm {
			return end.cpu - start.cpu
		}
		return end.cpu
	}
	u.group["bench"] = b.self - a.self
	for g, pid := range p.pids {
		u.group[g] = delta(pid)
	}
	for _, g := range cpuGroups {
		if !strings.HasPrefix(g, "pg_") {
			continue
		}
		seen := map[int]bool{}
		for _, pid := range slices.Concat(a.dbPIDs[g], b.dbPIDs[g]) {
			if !seen[pid] {
				seen[pid] = true
				u.group[g] += delta(pid)
			}
		}
	}
	for pid, info := range b.procs {
		switch info.comm {
		case "postgres":
			u.group["postgres"] += delta(pid)
		case "beam.smp":
			u.group["rabbitmq"] += delta(pid)
		}
	}
	for _, g := range []string{"bench", "order_api", "relay", "stock", "stock_relay", "shipping", "postgres", "rabbitmq"} {
		u.group["shop"] += u.group[g]
	}
	total := float64(b.machine.total - a.machine.total)
	if total > 0 {
		u.idle = float64(b.machine.idle-a.machine.idle) / total
		u.steal = float64(b.machine.steal-a.machine.steal) / total
		u.busyCores = (1 - u.idle - u.steal) * float64(runtime.NumCPU())
	}
	return u
}

// readProcs returns the command name and CPU time of every process of the
// machine; a process that ends while it reads is skipped.
func readProcs() (map[int]procInfo, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	out := make(map[int]procInfo, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		comm, err := os.ReadFile("/proc/" + e.Name() + "/comm")
		if err != nil {
			continue
		}
		cpu, err := processCPU(pid)
		if err != nil {
			continue
		}
		out[pid] = procInfo{comm: strings.TrimSuffix(string(comm), "\n"), cpu: cpu}
	}
	return out, nil
}

// readMachineTicks reads the first line of /proc/stat: user nice system idle
// iowait irq softirq steal (guest time is inside user already).
func readMachineTicks() (machineTicks, error) {
	raw, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineTicks{}, err
	}
	line, _, _ := strings.Cut(string(raw), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineTicks{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var v [8]uint64
	for i := range v {
		if v[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			return machineTicks{}, fmt.Errorf("/proc/stat: %w", err)
		}
	}
	var m machineTicks
	for _, n := range v {
		m.total += n
	}
	m.idle, m.steal = v[3]+v[4], v[7]
	return m, nil
}

// socketInodes returns the inodes of the sockets process pid has open
// (none when it cannot be read).
func socketInodes(pid int) []uint64 {
	dir := "/proc/" + strconv.Itoa(pid) + "/fd"
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []uint64
	for _, e := range entries {
		target, err := os.Readlink(dir + "/" + e.Name())
		if err != nil {
			continue
		}
		if rest, ok := strings.CutPrefix(target, "socket:["); ok {
			if n, err := strconv.ParseUint(strings.TrimSuffix(rest, "]"), 10, 64); err == nil {
				out = append(out, n)
			}
		}
	}
	return out
}

// localPorts maps the inode of every TCP socket of the machine to its local
// port, from /proc/net/tcp and /proc/net/tcp6.
func localPorts() (map[uint64]int, error) {
	out := map[uint64]int{}
	for _, file := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		raw, err := os.ReadFile(file)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		lines := strings.Split(string(raw), "\n")
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			if len(f) < 10 {
				continue
			}
			_, portHex, ok := strings.Cut(f[1], ":")
			if !ok {
				continue
			}
			port, err1 := strconv.ParseUint(portHex, 16, 16)
			inode, err2 := strconv.ParseUint(f[9], 10, 64)
			if err1 == nil && err2 == nil && inode != 0 {
				out[inode] = int(port)
			}
		}
	}
	return out, nil
}

// quietBusyShare is the largest share of the machine's CPUs that other work
// may keep busy before a latency run for the run to judge its goals.
const quietBusyShare = 0.25

// machineBusy returns how many of the machine's CPUs were busy on average
// (all processes, /proc/stat) over the next window, while the bench itself
// waits: other work, the load a latency run would compete with.
func machineBusy(ctx context.Context, window time.Duration) (float64, error) {
	a, err := readMachineTicks()
	if err != nil {
		return 0, err
	}
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-time.After(window):
	}
	b, err := readMachineTicks()
	if err != nil {
		return 0, err
	}
	total := float64(b.total - a.total)
	if total <= 0 {
		return 0, nil
	}
	idle := float64(b.idle-a.idle+b.steal-a.steal) / total
	return (1 - idle) * float64(runtime.NumCPU()), nil
}
