package testkit

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/testkit/rabbitadmin"
)

// findRabbitMQ dials TEST_AMQP_URL (default the local broker) and picks how
// to administer it: the management API at TEST_RABBITMQ_ADMIN_URL when set
// (cmd/testservers prints it for its container), else rabbitadmin.Detect.
func findRabbitMQ() (amqpURL string, admin *rabbitadmin.Admin, err error) {
	amqpURL = getenvOr("TEST_AMQP_URL", defaultAMQPURL)
	conn, err := amqp091.DialConfig(amqpURL, amqp091.Config{Dial: amqp091.DefaultDial(5 * time.Second)})
	if err != nil {
		return "", nil, fmt.Errorf("%s does not answer (%v); %s", hostOf(amqpURL), err, startServers)
	}
	_ = conn.Close()
	if m := os.Getenv("TEST_RABBITMQ_ADMIN_URL"); m != "" {
		admin, err = rabbitadmin.New(amqpURL, m)
		return amqpURL, admin, err
	}
	admin, err = rabbitadmin.Detect(context.Background(), amqpURL)
	return amqpURL, admin, err
}

// NewVhost creates a fresh virtual host on the test broker, grants the
// broker URL's user every right on it, deletes it when the test ends, and
// returns the AMQP URL that opens it. It uses the management HTTP API when
// the broker has one, else rabbitmqctl on this machine (see rabbitadmin).
func NewVhost(t testing.TB) string {
	t.Helper()
	AMQPURL(t)
	vhost := "test-" + randomHex(t, 6)
	admin := found.mqAdmin
	if err := admin.AddVhost(context.Background(), vhost); err != nil {
		t.Fatalf("testkit: %v (via %s)", err, admin.Via())
	}
	t.Cleanup(func() {
		if err := admin.DeleteVhost(context.Background(), vhost); err != nil {
			t.Errorf("testkit: %v (via %s)", err, admin.Via())
		}
	})
	return admin.VhostURL(vhost)
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the configured broker"
	}
	return u.Host
}

// CloseConnection makes the test broker close the client connection named
// name (its connection_name property), as an operator or a failing node
// would, through the management API when the broker has one, else
// rabbitmqctl on this machine. It waits up to 30 s for the broker to list
// the connection and fails t if it never does.
func CloseConnection(t testing.TB, name string) {
	t.Helper()
	AMQPURL(t)
	admin := found.mqAdmin
	end := time.Now().Add(30 * time.Second)
	for {
		n, err := admin.CloseConnections(context.Background(), name, "test: broker closes the connection")
		if err != nil {
			t.Fatalf("testkit: %v (via %s)", err, admin.Via())
		}
		if n > 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("testkit: connection %s not listed by the broker (via %s)", name, admin.Via())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// NewVhostWithUsers is NewVhost that also gives each of users (created when missing;
// RabbitMQ users are node-wide and are kept) its permissions on the new vhost. It
// returns the vhost's URL for the test's own user and one URL per user, by name.
func NewVhostWithUsers(t testing.TB, users []rabbitadmin.User) (string, map[string]string) {
	t.Helper()
	vhostURL := NewVhost(t)
	u, err := url.Parse(vhostURL)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	vhost, _ := url.PathUnescape(strings.TrimPrefix(u.EscapedPath(), "/"))
	ctx, cancel := bounded()
	defer cancel()
	if err := found.mqAdmin.AddUsers(ctx, vhost, users); err != nil {
		t.Fatalf("testkit: %v (via %s)", err, found.mqAdmin.Via())
	}
	urls := make(map[string]string, len(users))
	for _, user := range users {
		urls[user.Name] = found.mqAdmin.UserURL(vhost, user)
	}
	return vhostURL, urls
}
