//go:build drills

package e2e_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/platform/testkit"
)

// TestFaultBrokerCluster runs the shop on a private three-node RabbitMQ cluster:
// every process's AMQP_URL lists the three nodes, and every queue is a quorum
// queue with a member on each. One after the other, under load: the node leading
// stock.events' queue is killed with SIGKILL mid-stream (and started again), the
// node the order relay publishes through is stopped for 60 s, and the three nodes
// are restarted one at a time. Each ends with the ledger: 0 lost, 0 applied twice.
func TestFaultBrokerCluster(t *testing.T) {
	nodes, err := fault.StartCluster(testkit.Context(t), 3)
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
	st.run(t, r, "rolling-restart", func(t *testing.T, r *fault.Rig) {
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			for _, n := range nodes {
				if err := n.Shutdown(ctx); err != nil {
					t.Fatalf("stop %s: %v", n.Name, err)
				}
				if err := n.Start(ctx); err != nil {
					t.Fatalf("start %s again: %v", n.Name, err)
				}
				waitMembersOnline(t, r, len(nodes))
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

// queueLeader returns the node that leads queue's quorum queue.
func queueLeader(t *testing.T, r *fault.Rig, nodes []*fault.Node, queue string) *fault.Node {
	t.Helper()
	out, err := r.Ctl(testkit.Context(t), true, "list_queues", "name", "leader")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == queue {
			for _, n := range nodes {
				if n.Name == f[1] {
					return n
				}
			}
		}
	}
	t.Fatalf("no leader of %s among the nodes:\n%s", queue, out)
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

// waitMembersOnline waits (up to faultSettle) until every quorum queue of the
// rig's vhost has want members online.
func waitMembersOnline(t *testing.T, r *fault.Rig, want int) {
	t.Helper()
	ctx := testkit.Context(t)
	var out string
	var err error
	for deadline := time.Now().Add(faultSettle); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if out, err = r.Ctl(ctx, true, "list_queues", "name", "type", "online"); err == nil && allOnline(out, want) {
			return
		}
	}
	t.Fatalf("queues without %d members online after %s (%v):\n%s", want, faultSettle, err, out)
}

// allOnline reports whether every quorum queue of `list_queues name type
// online` names want online members.
func allOnline(out string, want int) bool {
	queues := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.SplitN(line, "\t", 3)
		if len(f) < 3 || f[1] != "quorum" {
			continue
		}
		queues++
		if strings.Count(f[2], "@") != want {
			return false
		}
	}
	return queues > 0
}

// clusterLedger checks the ledger and logs the drill's figures.
func clusterLedger(t *testing.T, r *fault.Rig) {
	t.Helper()
	l := ledger(t, r, nil)
	t.Logf("%s: %s", t.Name(), fmt.Sprintf("longest stall %s, %d duplicates, 0 lost, 0 applied twice",
		l.LongestStall.Round(10*time.Millisecond), l.Duplicates))
}
