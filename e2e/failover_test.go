//go:build drills

package e2e_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/fault"
	"example.com/shop/e2e/internal/system"
	"example.com/shop/testkit"
)

// TestFaultDatabaseFailover runs the order database on a private primary with a
// streaming standby (the services and relays get a multi-host URL with
// target_session_attrs=read-write), kills the primary with SIGKILL under load
// and promotes the standby 2 s later, as a failover manager would.
//
// Synchronous replication: nothing acknowledged is lost, and the ledger is whole.
// Asynchronous replication, with the standby detached (its replication stopped)
// for a moment before the kill: the commits of that moment are lost, orders and
// their outbox rows together; what the relay had published of them reached
// stock, whose answers to orders that no longer exist the auditor reports as
// unaccounted for, or dead-lettered, by order.
func TestFaultDatabaseFailover(t *testing.T) {
	t.Run("synchronous", func(t *testing.T) {
		pgc, r := failoverRig(t, true)
		var took time.Duration
		underLoad(t, r, 20, 20, func(ctx context.Context) { took = failover(t, pgc, r) })
		l := ledger(t, r, nil)
		missing, err := r.MissingPlaced(testkit.Context(t))
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) > 0 || r.Vanished() > 0 {
			t.Fatalf("after a synchronous failover %d placed orders are missing (%v) and %d created ones vanished; want none",
				len(missing), missing, r.Vanished())
		}
		t.Logf("synchronous failover: orders flowing again %s after the kill; %d orders placed, 0 lost, %d duplicates",
			took.Round(10*time.Millisecond), r.Placed(), l.Duplicates)
	})

	t.Run("asynchronous", func(t *testing.T) {
		pgc, r := failoverRig(t, false)
		ctx := testkit.Context(t)
		var took time.Duration
		var unreplicated int
		underLoad(t, r, 20, 20, func(ctx context.Context) {
			if err := pgc.Detach(ctx); err != nil {
				t.Fatal(err)
			}
			from := r.Placed()
			if err := r.WaitPlaced(ctx, from+10, faultSettle); err != nil {
				t.Fatalf("with the standby detached: %v", err)
			}
			unreplicated = r.Placed() - from
			took = failover(t, pgc, r)
		})
		missing, err := r.MissingPlaced(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(missing) == 0 {
			t.Fatalf("%d orders were placed while the standby was detached, and none was lost in the failover: the drill did not run", unreplicated)
		}
		// On the new primary an order and its events came and went together.
		var orphanEvents, silentOrders int
		if err := r.DBs.Order.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM outbox x WHERE NOT EXISTS (SELECT FROM orders o WHERE o.id::text = x.aggregate_key)),
			(SELECT count(*) FROM orders o WHERE o.status <> 'draft' AND NOT EXISTS (SELECT FROM outbox x WHERE x.aggregate_key = o.id::text))`).
			Scan(&orphanEvents, &silentOrders); err != nil {
			t.Fatal(err)
		}
		if orphanEvents > 0 || silentOrders > 0 {
			t.Errorf("on the new primary: %d outbox rows without their order, %d placed orders without an event; want 0, 0", orphanEvents, silentOrders)
		}
		// What the relay had published of the lost orders reached stock, whose
		// answers went back to order. An answer to an order that is gone was
		// applied on the old primary (its processed_event key lost with the
		// order) or dead-lettered on the new one (unknown order): the auditor
		// reports each, as unaccounted for or dead-lettered by order. (An answer to an order whose place alone was lost finds
		// a draft again, and is acknowledged as overtaken.)
		order := contracts.ConsumerOrder
		var gone int
		audit := waitAudit(t, r, func(a system.AuditReport) bool {
			var err error
			if gone, err = answersToOrdersGone(ctx, r); err != nil {
				t.Fatal(err)
			}
			return gone > 0 && a.Unaccounted[order]+a.DeadLettered[order] >= gone
		})
		t.Logf("asynchronous failover: orders flowing again %s after the kill; %d orders placed with the standby detached, "+
			"%d acknowledged placements lost (%d creations vanished); stock answered %d orders that are gone; "+
			"the auditor reports %d answers unaccounted for by order (applied on the old primary, their keys lost) and %d dead-lettered (unknown order)",
			took.Round(10*time.Millisecond), unreplicated, len(missing), r.Vanished(), gone,
			audit.Unaccounted[order], audit.DeadLettered[order])
	})
}

// answersToOrdersGone counts the answers in stock's outbox to orders the order
// database does not hold.
func answersToOrdersGone(ctx context.Context, r *fault.Rig) (int, error) {
	rows, err := r.DBs.Stock.Query(ctx, `SELECT aggregate_key FROM outbox`)
	if err != nil {
		return 0, err
	}
	keys, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return 0, err
	}
	var present int
	err = r.DBs.Order.QueryRow(ctx, `SELECT count(*) FROM unnest($1::text[]) k WHERE EXISTS (SELECT FROM orders WHERE id::text = k)`, keys).Scan(&present)
	return len(keys) - present, err
}

// waitAudit waits (up to faultSettle) for an audit report that ok accepts and
// returns it; the test fails with the last report otherwise.
func waitAudit(t *testing.T, r *fault.Rig, ok func(system.AuditReport) bool) system.AuditReport {
	t.Helper()
	ctx := testkit.Context(t)
	var last system.AuditReport
	var err error
	for deadline := time.Now().Add(faultSettle); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if last, err = r.API.Audit(ctx); err == nil && ok(last) {
			return last
		}
	}
	t.Fatalf("audit report not as wanted after %s: %+v (%v)", faultSettle, last, err)
	return last
}

// failoverRig starts a private primary and standby (synchronous or not) and a
// rig whose order database lives on them.
func failoverRig(t *testing.T, sync bool) (*fault.PGCluster, *fault.Rig) {
	t.Helper()
	pgc, err := fault.StartPGCluster(testkit.Context(t), sync)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pgc.Stop)
	r := newRig(t, sharedVhost(t), auditorEnv(), func(c *fault.Config) {
		c.DBURLs[contracts.ProducerOrder], c.Auditor = pgc.URL("shop_order"), true
	})
	return pgc, r
}

// failover kills the primary, promotes the standby 2 s later and returns how
// long after the kill the load driver saw an order placed again.
func failover(t *testing.T, pgc *fault.PGCluster, r *fault.Rig) time.Duration {
	t.Helper()
	ctx := testkit.Context(t)
	killed := time.Now()
	if err := pgc.Kill(pgc.Primary); err != nil {
		t.Fatalf("kill the primary: %v", err)
	}
	time.Sleep(2 * time.Second)
	if err := pgc.Promote(ctx); err != nil {
		t.Fatalf("promote the standby: %v", err)
	}
	t.Logf("standby promoted %s after the kill", time.Since(killed).Round(10*time.Millisecond))
	placed := r.Placed()
	if err := r.WaitPlaced(ctx, placed+1, faultSettle); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	return time.Since(killed)
}
