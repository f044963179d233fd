package amqp

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/config"
	"example.com/shop/testkit"
)

// onHost returns rawURL with its host:port replaced by hostPort.
func onHost(t testing.TB, rawURL, hostPort string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = hostPort
	return u.String()
}

// vhostTopology is a small private topology for a test on its own vhost
// (NewVhost deletes it, and everything in it, when the test ends).
func vhostTopology() Topology {
	return Topology{
		Exchange: "t.events", AlternateExchange: "t.alternate", UnroutableQueue: "t.unroutable",
		DeadLetterExchange: "t.dlx",
		Queues:             []QueueSpec{{Name: "t.q", DeadLetterQueue: "t.q.dlq", RoutingKeys: []string{testKey}}},
	}
}

// connectedNodes returns the node of every "amqp connected" line in logs, in order.
func connectedNodes(t testing.TB, logs *testkit.Logs) []string {
	t.Helper()
	var nodes []string
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() {
		var line struct{ Msg, Node string }
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if line.Msg == "amqp connected" {
			nodes = append(nodes, line.Node)
		}
	}
	return nodes
}

// The first node refuses: the first dial goes on to the second node at once,
// without backing off, and logs which node it is on, password masked.
func TestDialFallsThroughToTheNextNode(t *testing.T) {
	t.Parallel()
	live := testkit.NewVhost(t)
	dead := onHost(t, live, "127.0.0.1:1") // nothing listens on port 1
	logger, logs := testkit.Logger(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	// A backoff this long would show: the fall-through does not wait for it.
	opts := Options{Name: uniqueName(t, "nodes"), MinBackoff: 5 * time.Second, MaxBackoff: 5 * time.Second}
	start := time.Now()
	conn, err := DialOptions(ctx, dead+","+live, vhostTopology(), logger, opts)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("connecting took %v: the refused node was backed off from", d)
	}
	if err := conn.Ready(); err != nil {
		t.Fatalf("ready: %v", err)
	}
	got := connectedNodes(t, logs)
	if want := []string{config.MaskURL(live)}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("connected to %q, want %q", got, want)
	}
	if strings.Contains(logs.String(), "guest:guest") {
		t.Fatalf("a password in the logs:\n%s", logs)
	}
}

// Two nodes that accept a TCP connection and never answer the handshake
// would each hold a dial for its 30 s timeout. The caller's context ending
// cuts the dial under way: DialOptions returns at once with ctx's error, on
// the first attempt and while backing off, and leaves no socket open.
func TestDialReturnsWhenItsContextEnds(t *testing.T) {
	t.Parallel()
	silent, conns := silentNodes(t, 2)
	for _, wait := range []time.Duration{200 * time.Millisecond, 1500 * time.Millisecond} {
		ctx, cancel := context.WithTimeout(t.Context(), wait)
		start := time.Now()
		conn, err := DialOptions(ctx, strings.Join(silent, ","), vhostTopology(), nil,
			Options{MinBackoff: time.Second, MaxBackoff: time.Second})
		took := time.Since(start)
		cancel()
		t.Logf("a context of %v: DialOptions returned after %v", wait, took.Round(time.Millisecond))
		if err == nil {
			_ = conn.Close()
			t.Fatalf("dial to silent nodes succeeded")
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("after %v: error %v, want one that wraps context.DeadlineExceeded", wait, err)
		}
		if took > wait+time.Second {
			t.Errorf("with a context of %v, DialOptions returned after %v", wait, took)
		}
	}
	for _, c := range conns() {
		// The client closed its end: a read sees EOF (or a reset) at once.
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 64)
		for {
			_, err := c.Read(buf)
			if err == nil {
				continue // the protocol header the client sent
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Errorf("a socket to a silent node is still open")
			}
			break
		}
		_ = c.Close()
	}
}

// ctx ending just as the connection opens (here: while the "amqp connected"
// line is logged) is a failed dial: DialOptions returns ctx's error and
// shuts the connection down; the race detector checks the hand-over
// between the cut and the connection's goroutines.
func TestDialCancelledAsItConnects(t *testing.T) {
	t.Parallel()
	live := testkit.NewVhost(t)
	for _, pause := range []time.Duration{0, time.Millisecond, 20 * time.Millisecond} {
		ctx, cancel := context.WithCancel(t.Context())
		logger := slog.New(cancelOnConnected{cancel: cancel, pause: pause})
		conn, err := DialOptions(ctx, live, vhostTopology(), logger, Options{})
		cancel()
		if err == nil {
			_ = conn.Close()
			t.Fatalf("pause %v: DialOptions returned a connection after its context ended", pause)
		}
		if !errors.Is(err, context.Canceled) {
			t.Errorf("pause %v: error %v, want one that wraps context.Canceled", pause, err)
		}
	}
}

// cancelOnConnected is a log handler that calls cancel, then waits pause,
// when the "amqp connected" line is logged.
type cancelOnConnected struct {
	cancel func()
	pause  time.Duration
}

func (h cancelOnConnected) Enabled(context.Context, slog.Level) bool { return true }
func (h cancelOnConnected) Handle(_ context.Context, r slog.Record) error {
	if r.Message == "amqp connected" {
		h.cancel()
		time.Sleep(h.pause)
	}
	return nil
}
func (h cancelOnConnected) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h cancelOnConnected) WithGroup(string) slog.Handler      { return h }

// Nodes.Dial gives each silent node its own share of time and the call
// ctx's: with 300 ms per node both nodes are tried and named in the error;
// with a context of 300 ms and 10 s per node, the call ends with the context.
func TestNodesDialIsBoundedPerNodeAndPerCall(t *testing.T) {
	t.Parallel()
	silent, _ := silentNodes(t, 2)
	nodes, err := ParseNodes(strings.Join(silent, ","))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name         string
		perNode, ctx time.Duration
		want         string // in the error
		tried        int
		within       time.Duration
	}{
		{name: "per node", perNode: 300 * time.Millisecond, ctx: 30 * time.Second, want: "i/o timeout", tried: 2, within: 2 * time.Second},
		{name: "per call", perNode: 10 * time.Second, ctx: 300 * time.Millisecond, want: context.DeadlineExceeded.Error(), tried: 1, within: 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), c.ctx)
			defer cancel()
			start := time.Now()
			conn, _, err := nodes.Dial(ctx, c.perNode, amqp091.Config{})
			if err == nil {
				_ = conn.Close()
				t.Fatal("dial to silent nodes succeeded")
			}
			if took := time.Since(start); took > c.within {
				t.Errorf("Dial returned after %v, want within %v", took, c.within)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one that says %q", err, c.want)
			}
			if got := strings.Count(err.Error(), "amqp dial "); got < c.tried {
				t.Errorf("error names %d nodes, want %d: %v", got, c.tried, err)
			}
		})
	}
}

// silentNodes starts n listeners that accept TCP connections and never
// answer, and returns their AMQP URLs and a function that returns the
// connections they accepted so far.
func silentNodes(t *testing.T, n int) (urls []string, accepted func() []net.Conn) {
	t.Helper()
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // after the listeners close
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = ln.Close() })
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				mu.Lock()
				conns = append(conns, c)
				mu.Unlock()
			}
		})
		urls = append(urls, "amqp://guest:guest@"+ln.Addr().String()+"/")
	}
	return urls, func() []net.Conn {
		mu.Lock()
		defer mu.Unlock()
		if len(conns) == 0 {
			t.Fatal("no dial reached the silent nodes")
		}
		return slices.Clone(conns)
	}
}

// After the broker closes the connection, each reconnect starts with the
// node after the one tried last and falls through a dead node: with the
// nodes [dead, A, dead, B] (A and B the same broker under two names), the
// process is on A, then B, then A again.
func TestReconnectTriesTheNodesInTurn(t *testing.T) {
	t.Parallel()
	live := testkit.NewVhost(t)
	u, err := url.Parse(live)
	if err != nil {
		t.Fatal(err)
	}
	if h := u.Hostname(); h != "127.0.0.1" && h != "localhost" {
		t.Fatalf("the test broker %s is not on this machine: the test needs it under two names, 127.0.0.1 and localhost", h)
	}
	a, b := onHost(t, live, "127.0.0.1:"+u.Port()), onHost(t, live, "localhost:"+u.Port())
	list := strings.Join([]string{onHost(t, live, "127.0.0.1:1"), a, onHost(t, live, "127.0.0.1:2"), b}, ",")
	logger, logs := testkit.Logger(t)
	name := uniqueName(t, "nodes")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	conn, err := DialOptions(ctx, list, vhostTopology(), logger,
		Options{Name: name, MinBackoff: 5 * time.Millisecond, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	defer conn.Close()

	want := []string{config.MaskURL(a)}
	for _, next := range []string{b, a} {
		testkit.CloseConnection(t, name)
		want = append(want, config.MaskURL(next))
		eventually(t, 20*time.Second, "reconnect to "+next, func() bool {
			return len(connectedNodes(t, logs)) == len(want) && conn.Ready() == nil
		})
	}
	if got := connectedNodes(t, logs); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("connected to %q, want %q", got, want)
	}
}

// A list is refused at once, naming the bad entry, with passwords masked.
func TestParseNodesRefusesABadList(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ raw, want string }{
		{"amqp://u:secret@h1/shop,http://u:secret@h2/shop", `entry 2 of 2: "http://u:xxxxx@h2/shop" is not an AMQP URL`},
		{"amqp://u:secret@h1/shop,amqp://u:secret@h2:%zz/shop", `entry 2 of 2: "<unparseable URL>" is not an AMQP URL`},
		{"amqp://u:secret@h1/shop,amqp://u:secret@h2/other", `entry 2 of 2: "amqp://u:xxxxx@h2/other" has vhost "other" and user "u", entry 1 vhost "shop"`},
		{"amqp://u:secret@h1/shop,amqp://v:secret@h2/shop", `has vhost "shop" and user "v", entry 1 vhost "shop" and user "u"`},
		{"amqp://u:secret@h1/shop,", `"amqp://u:xxxxx@h1/shop," ends with a comma`},
		{"amqp://u:secret@h1/shop,,amqp://u:secret@h2/shop", `entry 1 of 2: "amqp://u:xxxxx@h1/shop," ends with a comma`},
	} {
		_, err := ParseNodes(tt.raw)
		if err == nil || !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("ParseNodes(%q) = %v, want an error with %q and no password", tt.raw, err, tt.want)
		}
		env := config.NewEnv(func(string) string { return tt.raw })
		URLFromEnv(env, "AMQP_URL", config.DefaultAMQPURL)
		if err := env.Err(); err == nil || !strings.Contains(err.Error(), "config: AMQP_URL: ") {
			t.Errorf("URLFromEnv(%q) recorded %v, want an AMQP_URL error", tt.raw, err)
		}
		if _, err := DialOptions(t.Context(), tt.raw, vhostTopology(), nil, Options{}); err == nil {
			t.Errorf("DialOptions(%q) dialled", tt.raw)
		}
	}
}

// A list of nodes of one cluster parses, each entry trimmed; a comma inside
// a password does not split a URL, and a single URL is one node.
func TestParseNodes(t *testing.T) {
	t.Parallel()
	for raw, want := range map[string][]string{
		"amqp://u:p@h1:5672/shop, amqp://u:p@h2:5672/shop ,amqps://u:p@h3:5671/shop": {
			"amqp://u:p@h1:5672/shop", "amqp://u:p@h2:5672/shop", "amqps://u:p@h3:5671/shop"},
		"amqp://u:a,b@h1/shop,amqp://u:a,b@h2/shop": {"amqp://u:a,b@h1/shop", "amqp://u:a,b@h2/shop"},
		config.DefaultAMQPURL:                       {config.DefaultAMQPURL},
	} {
		n, err := ParseNodes(raw)
		if err != nil {
			t.Errorf("ParseNodes(%q): %v", raw, err)
			continue
		}
		var got []string
		for range n.Len() + 1 {
			got = append(got, n.next())
		}
		want = append(want, want[0]) // round robin
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("ParseNodes(%q) gives %q, want %q", raw, got, want)
		}
	}
}
