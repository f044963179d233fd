// Package servetest runs a binary's `serve` in-process for tests, through the
// binary's run function, on a free local port against the real PostgreSQL and
// RabbitMQ, publishes events to it the way a relay does and takes what it sends.
package servetest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/contracts"
	"example.com/shop/platform/amqp"
	"example.com/shop/testkit"
)

// Run is a binary's whole program, as its main calls it: args are os.Args (the
// binary's name, then the subcommand), getenv reads the environment, command output
// goes to stdout and logs to stderr.
type Run func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// Server is one `serve` running in the background.
type Server struct {
	// URL is the base URL of its HTTP API, "http://127.0.0.1:<port>".
	URL string
	// Logs holds what serve wrote to stderr: its JSON log lines.
	Logs *testkit.Logs

	amqpURL string
	cancel  context.CancelFunc
	done    chan error
	stopped bool
}

// Start runs `name serve` through run in the background,
// reading vars as its environment with HTTP_ADDR set to a free local port, and
// returns once GET /readyz answers 200, failing t after 60 s. The database in vars
// must be migrated. Stop runs when the test ends unless the test called it.
func Start(t testing.TB, run Run, name string, vars map[string]string) *Server {
	t.Helper()
	addr := freeAddr(t)
	env := map[string]string{"HTTP_ADDR": addr}
	for k, v := range vars {
		if k != "HTTP_ADDR" {
			env[k] = v
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{URL: "http://" + addr, Logs: &testkit.Logs{}, amqpURL: env["AMQP_URL"], cancel: cancel, done: make(chan error, 1)}
	go func() {
		s.done <- run(ctx, []string{name, "serve"}, func(k string) string { return env[k] }, io.Discard, s.Logs)
	}()
	t.Cleanup(func() {
		s.Stop(t)
		if t.Failed() {
			t.Logf("%s serve logs:\n%s", name, s.Logs.Tail(8<<10))
		}
	})
	GetJSON(t, s.URL+"/readyz", http.StatusOK, nil)
	return s
}

// Stop cancels serve's context and waits for Run to return, at most 45 s. It fails t
// when Run returned an error (a clean shutdown returns nil), when serve logged at
// ERROR level, or when its logs show the broker's password. Later calls do nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	if s.stopped {
		return
	}
	s.stopped = true
	s.cancel()
	select {
	case err := <-s.done:
		if err != nil {
			t.Errorf("serve returned %v after shutdown, want nil", err)
		}
	case <-time.After(45 * time.Second):
		t.Error("serve did not stop within 45 s")
	}
	logs := s.Logs.String()
	if strings.Contains(logs, `"level":"ERROR"`) {
		t.Errorf("serve logged errors:\n%s", logs)
	}
	if u, err := url.Parse(s.amqpURL); err == nil {
		if pw, ok := u.User.Password(); ok && strings.Contains(logs, ":"+pw+"@") {
			t.Error("serve's logs show the broker password")
		}
	}
}

// Migrate runs `name migrate` through run with vars as the environment, failing t
// when it returns an error, and returns what it logged (JSON lines on stderr).
func Migrate(t testing.TB, run Run, name string, vars map[string]string) string {
	t.Helper()
	var out strings.Builder
	err := run(testkit.Context(t), []string{name, "migrate"}, func(k string) string { return vars[k] }, io.Discard, &out)
	if err != nil {
		t.Fatalf("%s migrate: %v", name, err)
	}
	return out.String()
}

// Placed returns a valid order.order.placed.v1 envelope, as the order service writes
// it, of a new order at version 2 with one line of quantity (a decimal string such as
// "2.000"), and its payload.
func Placed(t testing.TB, quantity string) (contracts.Envelope, contracts.OrderPlaced) {
	t.Helper()
	p := contracts.OrderPlaced{OrderID: uuid.New(), CustomerID: uuid.New(), Version: 2,
		Lines: []contracts.OrderLine{{ProductID: uuid.New(), Quantity: quantity}}}
	env, err := contracts.NewEnvelope(contracts.EventOrderPlaced, contracts.ProducerOrder, "corr-"+uuid.NewString(), p, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return env, p
}

// Publish publishes env to app.events on the broker at amqpURL as the relay does:
// routing key and type the event name, message id the event id, persistent, confirmed
// by the broker within 10 s. It declares the exchanges of amqp.EventTopology, no
// queue.
func Publish(t testing.TB, amqpURL string, env contracts.Envelope) {
	t.Helper()
	ctx := testkit.Context(t)
	body, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	topo := amqp.EventTopology()
	conn, err := amqp.Dial(ctx, amqpURL, topo, nil)
	if err != nil {
		t.Fatalf("publish: %v", err)
	}
	defer func() { _ = conn.Close() }()
	pub := amqp.NewPublisher(conn, topo.Exchange)
	defer func() { _ = pub.Close() }()
	_, err = pub.PublishBatch(ctx, []amqp.Message{{
		RoutingKey: env.EventName, Type: env.EventName, MessageID: env.EventID.String(), Body: body,
	}}, 10*time.Second)
	if err != nil {
		t.Fatalf("publish %s: %v", env.EventName, err)
	}
}

// Receive takes one message off queue on the broker at amqpURL, with automatic ack,
// polling every 20 ms and failing t after 60 s (a hang guard). The queue may not exist
// yet: each try has a connection of its own, because a get on a missing queue closes
// the channel, and one on a quorum queue still starting closes the whole connection
// (internal_error, noproc).
func Receive(t testing.TB, amqpURL, queue string) amqp091.Delivery {
	t.Helper()
	get := func() (amqp091.Delivery, bool, error) {
		conn, err := amqp091.Dial(amqpURL)
		if err != nil {
			return amqp091.Delivery{}, false, err
		}
		defer func() { _ = conn.Close() }()
		ch, err := conn.Channel()
		if err != nil {
			return amqp091.Delivery{}, false, err
		}
		return ch.Get(queue, true)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		d, ok, err := get()
		if ok {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no message in %s within 60 s (last: %v)", queue, err)
		}
	}
}

// GetJSON polls url every 20 ms until it answers the status want, failing t after
// 60 s (a hang guard, not a speed assertion), and decodes the body into dst unless
// dst is nil.
func GetJSON(t testing.TB, url string, want int, dst any) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == want {
				if dst != nil {
					if err := json.Unmarshal(body, dst); err != nil {
						t.Fatalf("GET %s: %s: %v", url, body, err)
					}
				}
				return
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s: want %d, last: %v", url, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Get returns the status and body of GET url, failing t when the request fails.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// freeAddr is testkit.FreeAddr, failing t.
func freeAddr(t testing.TB) string {
	t.Helper()
	addr, err := testkit.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	return addr
}
