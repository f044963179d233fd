package rabbitadmin_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/testkit"
	"example.com/shop/testkit/rabbitadmin"
)

func uniqueVhost(t *testing.T) string {
	t.Helper()
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "rabbitadmin-" + hex.EncodeToString(b)
}

// opens reports whether the user of amqpURL can open its vhost and declare a
// queue there.
func opens(amqpURL string) error {
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	_, err = ch.QueueDeclare("", false, true, true, false, nil)
	return err
}

// roundTrip adds the vhosts, checks that they open, deletes them, checks that
// they are gone, and deletes them again.
func roundTrip(t *testing.T, a *rabbitadmin.Admin, names []string) {
	t.Helper()
	ctx := testkit.Context(t)
	t.Cleanup(func() { _ = a.DeleteVhosts(context.Background(), names) })
	if err := a.AddVhosts(ctx, names); err != nil {
		t.Fatalf("AddVhosts via %s: %v", a.Via(), err)
	}
	for _, n := range names {
		if err := opens(a.VhostURL(n)); err != nil {
			t.Fatalf("vhost %q after AddVhosts via %s: %v", n, a.Via(), err)
		}
	}
	if err := a.DeleteVhosts(ctx, names); err != nil {
		t.Fatalf("DeleteVhosts via %s: %v", a.Via(), err)
	}
	for _, n := range names {
		if err := opens(a.VhostURL(n)); err == nil {
			t.Fatalf("vhost %q still opens after DeleteVhosts via %s", n, a.Via())
		}
	}
	if err := a.DeleteVhost(ctx, names[0]); err != nil {
		t.Fatalf("DeleteVhost of a missing vhost via %s: %v", a.Via(), err)
	}
}

func TestDetectedAdminAddsAndDeletes(t *testing.T) {
	t.Parallel()
	a, err := rabbitadmin.Detect(testkit.Context(t), testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Check(testkit.Context(t)); err != nil {
		t.Fatalf("Check via %s: %v", a.Via(), err)
	}
	t.Logf("detected: %s %s", a.Via(), a.Management())

	one := uniqueVhost(t)
	ctx := testkit.Context(t)
	t.Cleanup(func() { _ = a.DeleteVhost(context.Background(), one) })
	if err := a.AddVhost(ctx, one); err != nil {
		t.Fatalf("AddVhost: %v", err)
	}
	if err := a.AddVhost(ctx, one); err != nil {
		t.Fatalf("AddVhost of an existing vhost: %v", err)
	}
	if err := opens(a.VhostURL(one)); err != nil {
		t.Fatalf("vhost after AddVhost: %v", err)
	}
	if err := a.DeleteVhost(ctx, one); err != nil {
		t.Fatalf("DeleteVhost: %v", err)
	}

	roundTrip(t, a, []string{uniqueVhost(t), uniqueVhost(t) + "/with slash"})
}

// TestRabbitmqctlAdmin runs the fallback: the batched eval and the single
// commands. Where rabbitmqctl is not installed it checks that the error says
// which command failed.
func TestRabbitmqctlAdmin(t *testing.T) {
	t.Parallel()
	a, err := rabbitadmin.New(testkit.AMQPURL(t), "")
	if err != nil {
		t.Fatal(err)
	}
	if a.Via() != rabbitadmin.ViaRabbitmqctl || a.Management() != "" {
		t.Fatalf("New without a management URL uses %s %q", a.Via(), a.Management())
	}
	if _, err := exec.LookPath("rabbitmqctl"); err != nil {
		err := a.AddVhost(testkit.Context(t), uniqueVhost(t))
		if err == nil || !strings.Contains(err.Error(), "rabbitmqctl add_vhost") {
			t.Fatalf("AddVhost without rabbitmqctl: got %v, want an error naming rabbitmqctl add_vhost", err)
		}
		return
	}
	// The batch, with names that need quoting in Erlang.
	roundTrip(t, a, []string{uniqueVhost(t), uniqueVhost(t) + `-"q"\é`})
	// One name: add_vhost, set_permissions, delete_vhost.
	roundTrip(t, a, []string{uniqueVhost(t)})
}

func TestVhostURL(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ amqpURL, name, want string }{
		{"amqp://guest:guest@127.0.0.1:5672/", "shop-demo", "amqp://guest:guest@127.0.0.1:5672/shop-demo"},
		{"amqp://u:p@broker:5672/other?heartbeat=5", "a/b c", "amqp://u:p@broker:5672/a%2Fb%20c?heartbeat=5"},
		{"amqps://broker", "v", "amqps://broker/v"},
	} {
		a, err := rabbitadmin.New(tc.amqpURL, "")
		if err != nil {
			t.Fatal(err)
		}
		if got := a.VhostURL(tc.name); got != tc.want {
			t.Errorf("VhostURL(%q) of %s = %s, want %s", tc.name, tc.amqpURL, got, tc.want)
		}
		u, err := amqp091.ParseURI(a.VhostURL(tc.name))
		if err != nil {
			t.Fatal(err)
		}
		if u.Vhost != tc.name {
			t.Errorf("VhostURL(%q) opens vhost %q", tc.name, u.Vhost)
		}
	}
	for _, bad := range []string{"http://127.0.0.1:15672", "::not a url"} {
		if _, err := rabbitadmin.New(bad, ""); err == nil {
			t.Errorf("New(%q) succeeded", bad)
		}
	}
}

func TestDetectWithoutManagementFallsBack(t *testing.T) {
	t.Parallel()
	// Port 15672 of a TEST-NET address answers nothing within the probe.
	a, err := rabbitadmin.Detect(testkit.Context(t), "amqp://guest:guest@192.0.2.1:5672/")
	if err != nil {
		t.Fatal(err)
	}
	if a.Via() != rabbitadmin.ViaRabbitmqctl {
		t.Fatalf("Detect on a silent host chose %s %q", a.Via(), a.Management())
	}
}

// CloseConnections closes exactly the named connection, through the detected
// way and through rabbitmqctl, and the client learns the reason.
func TestCloseConnections(t *testing.T) {
	t.Parallel()
	detected, err := rabbitadmin.Detect(testkit.Context(t), testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	admins := []*rabbitadmin.Admin{detected}
	if detected.Via() != rabbitadmin.ViaRabbitmqctl {
		ctl, err := rabbitadmin.New(testkit.AMQPURL(t), "")
		if err != nil {
			t.Fatal(err)
		}
		admins = append(admins, ctl)
	}
	for _, a := range admins {
		dial := func(name string) chan *amqp091.Error {
			props := amqp091.NewConnectionProperties()
			props.SetClientConnectionName(name)
			conn, err := amqp091.DialConfig(testkit.AMQPURL(t), amqp091.Config{Properties: props, Dial: amqp091.DefaultDial(5 * time.Second)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = conn.Close() })
			return conn.NotifyClose(make(chan *amqp091.Error, 1))
		}
		name := uniqueVhost(t) + "-conn"
		target, bystander := dial(name), dial(name+"-other")

		end := time.Now().Add(30 * time.Second)
		for {
			n, err := a.CloseConnections(testkit.Context(t), name, "closed by a test")
			if err != nil {
				t.Fatalf("CloseConnections via %s: %v", a.Via(), err)
			}
			if n == 1 {
				break
			}
			if n > 1 || time.Now().After(end) {
				t.Fatalf("CloseConnections via %s closed %d connections", a.Via(), n)
			}
			time.Sleep(200 * time.Millisecond)
		}
		select {
		case e := <-target:
			if e == nil || e.Code != amqp091.ConnectionForced || !strings.Contains(e.Reason, "closed by a test") {
				t.Fatalf("via %s the client saw %v", a.Via(), e)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("via %s the connection was not closed", a.Via())
		}
		select {
		case e := <-bystander:
			t.Fatalf("via %s another connection was closed too: %v", a.Via(), e)
		default:
		}
	}
}
