package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/e2e/internal/fault"
	"example.com/shop/platform/backoff"
)

// kind is one sort of fault: it picks its target with rng, raises the fault,
// holds it d and lifts it before returning (a single blow when min = max = 0).
type kind struct {
	name     string
	min, max time.Duration
	apply    func(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (target string, err error)
}

// lane raises one fault at a time, with a random gap before each; the lanes
// run side by side, so that faults of different lanes overlap.
type lane struct {
	name           string
	gapMin, gapMax time.Duration
	kinds          []kind
}

// laneSpecs are the nemesis: the broker hosts, the database, and the
// processes (two lanes).
func laneSpecs() []lane {
	procs := []kind{
		{"process-kill", 0, 0, processKill},
		{"process-stop", 2 * time.Second, 15 * time.Second, processStop},
	}
	return []lane{
		{"broker", 3 * time.Second, 10 * time.Second, []kind{
			{"partition-halves", 10 * time.Second, 30 * time.Second, partitionHalves},
			{"partition-bridge", 10 * time.Second, 30 * time.Second, partitionBridge},
			{"partition-ring", 12 * time.Second, 30 * time.Second, partitionRing},
			{"node-isolated", 10 * time.Second, 30 * time.Second, nodeIsolated},
			{"client-cut", 10 * time.Second, 30 * time.Second, clientCut},
			{"node-kill", 2 * time.Second, 10 * time.Second, nodeKill},
			{"node-pause", 5 * time.Second, 20 * time.Second, nodePause},
		}},
		{"database", 5 * time.Second, 20 * time.Second, []kind{
			{"db-failover", time.Second, 3 * time.Second, dbFailover},
			{"db-restart", 0, 0, dbRestart},
		}},
		{"process", 2 * time.Second, 8 * time.Second, procs},
		{"process", 2 * time.Second, 8 * time.Second, procs},
	}
}

// lane runs l until ctx ends; the fault under way when it ends is held and
// lifted in full.
func (r *run) lane(ctx context.Context, l lane, rng *rand.Rand) {
	for {
		gap := l.gapMin + time.Duration(rng.Int64N(int64(l.gapMax-l.gapMin)))
		if backoff.Sleep(ctx, gap) != nil {
			return
		}
		k := l.kinds[rng.IntN(len(l.kinds))]
		d := k.min
		if k.max > k.min {
			d += time.Duration(rng.Int64N(int64(k.max - k.min)))
		}
		at := time.Since(r.start)
		overlap := r.active.Add(1) > 1
		target, err := k.apply(context.WithoutCancel(ctx), r, rng, d)
		r.active.Add(-1)
		r.mu.Lock()
		r.res.Faults[k.name]++
		if overlap {
			r.res.Overlapping++
		}
		r.mu.Unlock()
		line := fmt.Sprintf("%-9s %-9s %-18s %-44s %s", fmtDur(at), l.name, k.name, target, fmtDur(d))
		if err != nil {
			if r.opts.Log != nil {
				r.printLog("chaos   | %s %s on %s at %s: %v\n", l.name, k.name, target, fmtDur(at), err)
			}
			line += "  ERROR: " + firstLine(err.Error())
			r.faultError("%s on %s at %s: %v", k.name, target, fmtDur(at), firstLine(err.Error()))
		}
		r.printf("%s  (placed %d)\n", line, r.rig.Placed())
	}
}

// drop cuts each pair of broker hosts off each other, both ways, and returns
// the function that heals it.
func (r *run) drop(ctx context.Context, pairs [][2]int) (func() error, error) {
	var undo []func() error
	heal := func() error {
		var errs []error
		for _, u := range undo {
			errs = append(errs, u())
		}
		return errors.Join(errs...)
	}
	for _, p := range pairs {
		for _, dir := range [][2]int{{p[0], p[1]}, {p[1], p[0]}} {
			from, to := r.hosts.All[dir[0]], r.hosts.All[dir[1]]
			if err := r.hosts.Drop(ctx, from, to.IP); err != nil {
				return nil, errors.Join(err, heal())
			}
			undo = append(undo, func() error { return r.hosts.Undrop(context.WithoutCancel(ctx), from, to.IP) })
		}
	}
	return heal, nil
}

// partitionHalves cuts one node off the other two (the clients reach all three).
func partitionHalves(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	i := rng.IntN(len(r.nodes))
	var pairs [][2]int
	for j := range r.nodes {
		if j != i {
			pairs = append(pairs, [2]int{i, j})
		}
	}
	return r.hold(ctx, fmt.Sprintf("%s | others", short(r.nodes[i])), d, pairs)
}

// partitionBridge cuts two nodes off each other; the third sees both, and
// every node sees a majority (with three nodes, the majority ring).
func partitionBridge(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	b := rng.IntN(len(r.nodes))
	return r.hold(ctx, "bridge "+short(r.nodes[b]), d, [][2]int{others(b, len(r.nodes))})
}

// partitionRing holds a bridge whose bridging node moves round the ring every
// 3 to 6 seconds: each node keeps seeing a majority, never the same one for long.
func partitionRing(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	// The steps are drawn first, so that the seed alone decides them.
	b := rng.IntN(len(r.nodes))
	var steps []time.Duration
	for left := d; left > 0; {
		step := min(left, time.Duration(3000+rng.IntN(3000))*time.Millisecond)
		steps, left = append(steps, step), left-step
	}
	var moves []string
	var errs []error
	for _, step := range steps {
		heal, err := r.drop(ctx, [][2]int{others(b, len(r.nodes))})
		if err != nil {
			return "ring " + strings.Join(moves, ">"), err
		}
		moves = append(moves, short(r.nodes[b]))
		_ = backoff.Sleep(ctx, step)
		errs = append(errs, heal())
		b = (b + 1) % len(r.nodes)
	}
	target := "ring " + strings.Join(moves, ">")
	return target, errors.Join(append(errs, r.brokerWhole(ctx, target))...)
}

// hold partitions pairs for d, heals, and waits until the cluster is whole.
func (r *run) hold(ctx context.Context, target string, d time.Duration, pairs [][2]int) (string, error) {
	heal, err := r.drop(ctx, pairs)
	if err != nil {
		return target, err
	}
	_ = backoff.Sleep(ctx, d)
	return target, errors.Join(heal(), r.brokerWhole(ctx, target))
}

// nodeIsolated takes a node's link down: cut from the other nodes and from every client.
func nodeIsolated(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	i := rng.IntN(len(r.nodes))
	target := short(r.nodes[i])
	if err := r.hosts.Cut(ctx, r.hosts.All[i]); err != nil {
		return target, err
	}
	_ = backoff.Sleep(ctx, d)
	return target, errors.Join(r.hosts.Heal(ctx, r.hosts.All[i]), r.brokerWhole(ctx, target))
}

// clientCut cuts every client (the shop's processes) off one node; the nodes
// still see each other.
func clientCut(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	i := rng.IntN(len(r.nodes))
	target := "clients x " + short(r.nodes[i])
	if err := r.hosts.Drop(ctx, r.hosts.All[i], r.hosts.Clients); err != nil {
		return target, err
	}
	_ = backoff.Sleep(ctx, d)
	return target, errors.Join(r.hosts.Undrop(ctx, r.hosts.All[i], r.hosts.Clients), r.brokerWhole(ctx, target))
}

// nodeKill kills a node with SIGKILL, leaves it down d and starts it again.
func nodeKill(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	n := r.nodes[rng.IntN(len(r.nodes))]
	n.Kill()
	_ = backoff.Sleep(ctx, d)
	return short(n), errors.Join(n.Start(ctx), r.brokerWhole(ctx, short(n)))
}

// nodePause freezes a node (SIGSTOP of its processes) for d, then SIGCONT.
func nodePause(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	n := r.nodes[rng.IntN(len(r.nodes))]
	if err := n.Signal(syscall.SIGSTOP); err != nil {
		return short(n), err
	}
	_ = backoff.Sleep(ctx, d)
	return short(n), errors.Join(n.Signal(syscall.SIGCONT), r.brokerWhole(ctx, short(n)))
}

// dbFailover kills the primary, promotes the standby d later and rewinds the
// old primary into the new standby.
func dbFailover(ctx context.Context, r *run, _ *rand.Rand, d time.Duration) (string, error) {
	target := fmt.Sprintf("primary :%d -> :%d", r.pg.Primary.Port, r.pg.Standby.Port)
	if err := r.pg.Healthy(ctx, healthy); err != nil {
		return target, err
	}
	return target, r.pg.Failover(ctx, d)
}

// dbRestart restarts the primary or the standby, as a crash (-m immediate) or cleanly.
func dbRestart(ctx context.Context, r *run, rng *rand.Rand, _ time.Duration) (string, error) {
	s, role := r.pg.Primary, "primary"
	if rng.IntN(2) == 1 {
		s, role = r.pg.Standby, "standby"
	}
	immediate := rng.IntN(2) == 1
	target := fmt.Sprintf("%s :%d (-m fast)", role, s.Port)
	if immediate {
		target = fmt.Sprintf("%s :%d (-m immediate)", role, s.Port)
	}
	return target, errors.Join(r.pg.Restart(ctx, s, immediate), r.pg.Healthy(ctx, healthy))
}

// processKill kills a process with SIGKILL and starts it again, as a supervisor would.
func processKill(ctx context.Context, r *run, rng *rand.Rand, _ time.Duration) (string, error) {
	name, release := r.claim(rng)
	if name == "" {
		return "(all held)", nil
	}
	defer release()
	if err := r.rig.Kill(ctx, r.rig.Process(name), restartWait); err != nil {
		r.mu.Lock()
		r.res.NotReadySoon = append(r.res.NotReadySoon, name+": "+firstLine(err.Error()))
		r.mu.Unlock()
		return name + " (not ready in time)", nil
	}
	return name, nil
}

// processStop freezes a process (SIGSTOP) for d, then SIGCONT.
func processStop(ctx context.Context, r *run, rng *rand.Rand, d time.Duration) (string, error) {
	name, release := r.claim(rng)
	if name == "" {
		return "(all held)", nil
	}
	defer release()
	return name, r.rig.Freeze(ctx, r.rig.Process(name), d)
}

// claim picks a process no other fault holds, and returns it with the
// function that releases it; "" when every one is held.
func (r *run) claim(rng *rand.Rand) (string, func()) {
	var names []string
	for _, p := range r.rig.Sys.All() {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	name := names[rng.IntN(len(names))]
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := 0; r.busy[name]; i++ {
		if i == len(names) {
			return "", func() {}
		}
		name = names[(slices.Index(names, name)+1)%len(names)]
	}
	r.busy[name] = true
	return name, func() {
		r.mu.Lock()
		delete(r.busy, name)
		r.mu.Unlock()
	}
}

// brokerWhole waits (up to healthy) until every node runs, accepts AMQP
// connections and reports no partition. A node still apart then is killed and
// started again, as an operator would, and the repair recorded.
func (r *run) brokerWhole(ctx context.Context, after string) error {
	bad, err := r.waitWhole(ctx, healthy)
	if err == nil {
		return nil
	}
	for _, n := range bad {
		n.Kill()
		if serr := n.Start(ctx); serr != nil {
			return fmt.Errorf("%w; restarting %s: %v", err, n.Name, serr)
		}
	}
	if _, err2 := r.waitWhole(ctx, healthy); err2 != nil {
		return fmt.Errorf("after %s the broker cluster is not whole, even after restarting %v: %w", after, nodeNames(bad), err2)
	}
	r.repaired("after %s: %v; restarted %v", after, firstLine(err.Error()), nodeNames(bad))
	return nil
}

// waitWhole returns the nodes that are not whole after timeout, with an error
// saying why.
func (r *run) waitWhole(ctx context.Context, timeout time.Duration) ([]*fault.Node, error) {
	deadline := time.Now().Add(timeout)
	for {
		var bad []*fault.Node
		var why []string
		for _, n := range r.nodes {
			conn, err := amqp091.DialConfig(n.AMQPURL, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
			if err != nil {
				bad, why = append(bad, n), append(why, short(n)+": "+firstLine(err.Error()))
				continue
			}
			conn.Close()
		}
		if len(bad) == 0 {
			for _, n := range r.nodes {
				out, err := n.Ctl(ctx, "eval", "rabbit_node_monitor:partitions().")
				if err != nil || strings.TrimSpace(out) != "[]" {
					bad, why = append(bad, n), append(why, short(n)+" partitioned from "+strings.TrimSpace(firstLine(out)))
				}
			}
		}
		if len(bad) == 0 {
			return nil, nil
		}
		if time.Now().After(deadline) {
			return bad, fmt.Errorf("not whole after %s: %s", timeout, strings.Join(why, "; "))
		}
		if err := backoff.Sleep(ctx, 2*time.Second); err != nil {
			return bad, err
		}
	}
}

// others returns the two indexes of n other than b (n = 3).
func others(b, n int) [2]int {
	return [2]int{(b + 1) % n, (b + 2) % n}
}

// short is a node's name without its host.
func short(n *fault.Node) string {
	name, _, _ := strings.Cut(n.Name, "@")
	return name
}
