//go:build drills

package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/testkit"
)

// TestFaultBrokerCluster runs the shop on a private three-node RabbitMQ cluster,
// each node on a host of its own (a network namespace): every process's AMQP_URL
// lists the three nodes, and every quorum queue has a member on each. One after
// the other, under load: the node leading stock.events' queue is killed with
// SIGKILL mid-stream (and started again), the node the order relay publishes
// through is stopped for 60 s, the leader's host is cut off from the other two
// and from every client for 30 s, and the three nodes are restarted one at a
// time. Each ends with the ledger: 0 lost, 0 applied twice.
func TestFaultBrokerCluster(t *testing.T) {
	hosts, err := fault.NewHosts(testkit.Context(t), 3)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hosts.Close)
	nodes, err := fault.StartCluster(testkit.Context(t), hosts)
	if err != nil {
		t.Fatalf("private RabbitMQ cluster: %v", err)
	}
	for _, n := range nodes {
		t.Cleanup(n.Stop)
	}
	b := clusterVhost(t, nodes)
	r := newRig(t, b, nil)
	var st steps
	st.run(t, r, "kill-queue-leader", func(t *testing.T, r *fault.Rig) {
		leader := queueLeader(t, r, nodes, contracts.QueueStock)
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			leader.Kill()
			t.Logf("killed %s, the leader of %s", leader.Name, contracts.QueueStock)
			if err := leader.Start(ctx); err != nil {
				t.Fatalf("start %s again: %v", leader.Name, err)
			}
		})
		clusterLedger(t, r)
	})
	st.run(t, r, "stop-relay-node", func(t *testing.T, r *fault.Rig) {
		ctx := testkit.Context(t)
		relay, err := r.Leader(ctx, faultSettle)
		if err != nil {
			t.Fatal(err)
		}
		node := connectedNode(t, relay.Output(), nodes)
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			if err := node.Shutdown(ctx); err != nil {
				t.Fatalf("stop %s: %v", node.Name, err)
			}
			t.Logf("stopped %s, the node of the relay", node.Name)
			time.Sleep(60 * time.Second)
			if err := node.Start(ctx); err != nil {
				t.Fatalf("start %s again: %v", node.Name, err)
			}
		})
		clusterLedger(t, r)
	})
	st.run(t, r, "partition", func(t *testing.T, r *fault.Rig) {
		leader := queueLeader(t, r, nodes, contracts.QueueStock)
		host := hosts.All[slices.Index(nodes, leader)]
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			if err := hosts.Cut(ctx, host); err != nil {
				t.Fatal(err)
			}
			t.Logf("cut %s, the leader of %s, off from the others and the clients", leader.Name, contracts.QueueStock)
			time.Sleep(30 * time.Second)
			if err := hosts.Heal(ctx, host); err != nil {
				t.Fatal(err)
			}
			waitMembersOnline(t, r, nodes, len(nodes))
		})
		clusterLedger(t, r)
	})
	st.run(t, r, "rolling-restart", func(t *testing.T, r *fault.Rig) {
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			for _, n := range nodes {
				if err := n.Shutdown(ctx); err != nil {
					t.Fatalf("stop %s: %v", n.Name, err)
				}
				if err := n.Start(ctx); err != nil {
					t.Fatalf("start %s again: %v", n.Name, err)
				}
				waitMembersOnline(t, r, nodes, len(nodes))
				t.Logf("restarted %s; every queue has its %d members online", n.Name, len(nodes))
			}
		})
		clusterLedger(t, r)
	})
}

// clusterVhost makes a fresh vhost on the cluster; its URL lists every node.
// rabbitmqctl runs on the first node that answers.
func clusterVhost(t *testing.T, nodes []*fault.Node) broker {
	ctx := testkit.Context(t)
	vhost := testkit.UniqueName(t, "cluster")
	ctl := func(ctx context.Context, args ...string) (string, error) {
		var errs []error
		for _, n := range nodes {
			out, err := n.Ctl(ctx, args...)
			if err == nil {
				return out, nil
			}
			errs = append(errs, err)
		}
		return "", errors.Join(errs...)
	}
	for _, args := range [][]string{{"add_vhost", vhost}, {"set_permissions", "-p", vhost, "guest", ".*", ".*", ".*"}} {
		if _, err := ctl(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = n.AMQPURL + url.PathEscape(vhost)
	}
	return broker{amqpURL: strings.Join(urls, ","), vhost: vhost, ctl: ctl}
}

// localQueues lists, as `rabbitmqctl list_queues --local` on every node that
// answers, the rig's queues that each node leads, with the info items asked
// for after the node's name, one tab-separated line per queue. (Listing them
// from one node would need every node to reach the tool, which a node on
// another host cannot.)
func localQueues(ctx context.Context, r *fault.Rig, nodes []*fault.Node, items ...string) [][]string {
	var lines [][]string
	for _, n := range nodes {
		out, err := n.Ctl(ctx, append([]string{"list_queues", "-p", r.Vhost(), "--local", "--no-table-headers", "--quiet"}, items...)...)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if line != "" {
				lines = append(lines, append([]string{n.Name}, strings.Split(line, "\t")...))
			}
		}
	}
	return lines
}

// queueLeader returns the node that leads queue's quorum queue.
func queueLeader(t *testing.T, r *fault.Rig, nodes []*fault.Node, queue string) *fault.Node {
	t.Helper()
	lines := localQueues(testkit.Context(t), r, nodes, "name")
	for _, f := range lines {
		if f[1] == queue {
			return nodes[slices.IndexFunc(nodes, func(n *fault.Node) bool { return n.Name == f[0] })]
		}
	}
	t.Fatalf("no node leads %s: %v", queue, lines)
	return nil
}

// connectedNode returns the node a process's last "amqp connected" log line
// names, from its output.
func connectedNode(t *testing.T, output string, nodes []*fault.Node) *fault.Node {
	t.Helper()
	lines := strings.Split(output, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if !strings.Contains(lines[i], `"amqp connected"`) {
			continue
		}
		for _, n := range nodes {
			u, err := url.Parse(n.AMQPURL)
			if err == nil && strings.Contains(lines[i], u.Host+"/") {
				return n
			}
		}
	}
	t.Fatalf("no \"amqp connected\" line naming a node of the cluster in:\n%s", output)
	return nil
}

// waitMembersOnline waits (up to faultSettle) until every consumer's queue has
// a leader and every quorum queue of the rig's vhost want members online.
func waitMembersOnline(t *testing.T, r *fault.Rig, nodes []*fault.Node, want int) {
	t.Helper()
	ctx := testkit.Context(t)
	var lines [][]string
	for deadline := time.Now().Add(faultSettle); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		lines = localQueues(ctx, r, nodes, "name", "type", "online")
		ok, led := true, 0
		for _, f := range lines {
			if len(f) == 4 && f[2] == "quorum" {
				ok = ok && strings.Count(f[3], "@") == want
				if slices.ContainsFunc(contracts.Consumers(), func(c contracts.Consumer) bool { return c.Queue == f[1] }) {
					led++
				}
			}
		}
		if ok && led == len(contracts.Consumers()) {
			return
		}
	}
	t.Fatalf("quorum queues without a leader or %d members online after %s: %v", want, faultSettle, lines)
}

// clusterLedger checks the ledger and logs the drill's figures.
func clusterLedger(t *testing.T, r *fault.Rig) {
	t.Helper()
	l := ledger(t, r, nil)
	t.Logf("%s: %s", t.Name(), fmt.Sprintf("longest stall %s, %d duplicates, 0 lost, 0 applied twice",
		l.LongestStall.Round(10*time.Millisecond), l.Duplicates))
}
