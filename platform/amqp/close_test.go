package amqp

import (
	"errors"
	"io"
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"example.com/shop/testkit"
)

// stallProxy forwards TCP connections to a broker. Once stalled, nothing a
// client sends reaches the broker any more, while what the broker sends
// (heartbeats) still reaches the client: a broker that stopped reading, as
// a broker does during a resource alarm, or a network that lost one
// direction, without touching the broker itself.
type stallProxy struct {
	ln      net.Listener
	target  string
	stalled atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

// newStallProxy starts a proxy to the broker of rawURL and returns it with
// the URL that goes through it; it is closed when the test ends.
func newStallProxy(t *testing.T, rawURL string) (*stallProxy, string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &stallProxy{ln: ln, target: u.Host}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	u.Host = ln.Addr().String()
	return p, u.String()
}

func (p *stallProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return
		}
		server, err := net.DialTimeout("tcp", p.target, 10*time.Second)
		if err != nil {
			_ = client.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, client, server)
		p.mu.Unlock()
		p.wg.Add(2)
		go func() { // broker to client: always
			defer p.wg.Done()
			_, _ = io.Copy(client, server)
			_ = client.Close()
		}()
		go func() { // client to broker: dropped once stalled
			defer p.wg.Done()
			buf := make([]byte, 32<<10)
			for {
				n, err := client.Read(buf)
				if n > 0 && !p.stalled.Load() {
					if _, werr := server.Write(buf[:n]); werr != nil {
						return
					}
				}
				if err != nil {
					_ = server.Close()
					return
				}
			}
		}()
	}
}

func (p *stallProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// Close returns within about CloseTimeout when the broker stops reading
// without blocking the connection (no connection.blocked): the handshake
// gets CloseTimeout, then the socket is closed. The broker's heartbeats,
// which still arrive, do not stretch it. A publish on the stalled connection
// fails within its own timeout and counts nothing as confirmed. CloseAll
// closes two such connections within one CloseTimeout, not two.
func TestCloseIsBoundedWhenTheBrokerStopsReading(t *testing.T) {
	t.Parallel()
	topo := testTopology(t)
	proxy, proxied := newStallProxy(t, amqpURL(t))
	logger, logs := testkit.Logger(t)
	const closeTimeout = 5 * time.Second // the broker sends a heartbeat within it
	dial := func(name string) *Connection {
		conn, err := DialOptions(t.Context(), proxied, topo, logger, Options{
			MinBackoff: 10 * time.Millisecond, MaxBackoff: 100 * time.Millisecond, CloseTimeout: closeTimeout, Name: name,
		})
		if err != nil {
			t.Fatal(err)
		}
		return conn
	}
	conn, other := dial("publishing"), dial("idle")
	pub := NewPublisher(conn, topo.Exchange)
	if _, err := pub.PublishBatch(t.Context(), messages(3, "before"), 5*time.Second); err != nil {
		t.Fatalf("publish before the stall: %v", err)
	}

	proxy.stalled.Store(true)
	confirmed, err := pub.PublishBatch(t.Context(), messages(3, "stalled"), time.Second)
	if confirmed != 0 || !errors.Is(err, ErrConfirmTimeout) {
		t.Fatalf("publish into the stall: %d confirmed, %v; want 0 and ErrConfirmTimeout", confirmed, err)
	}
	// The limit allows 3 s for a busy machine; the library alone would wait
	// until its heartbeat write fails, 9 to 19 s.
	within(t, closeTimeout+3*time.Second, "CloseAll of two connections while the broker reads nothing", func() {
		_ = pub.Close()
		if err := CloseAll(conn, nil, other); err != nil {
			t.Errorf("CloseAll: %v", err)
		}
	})
	if err := conn.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("Close after CloseAll: %v, want ErrClosed", err)
	}
	if !strings.Contains(logs.String(), "connection.close not answered in time") {
		t.Errorf("no WARN line for the socket closed after CloseTimeout:\n%s", logs)
	}
}
