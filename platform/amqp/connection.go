package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/url"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
)

// ErrClosed is returned by Connection methods after Close.
var ErrClosed = errors.New("amqp: connection manager closed")

// Options tunes a Connection. The zero value gives the defaults.
type Options struct {
	// MinBackoff is the first wait between connection attempts
	// (default 100 ms). It doubles on each failure up to MaxBackoff.
	MinBackoff time.Duration
	// MaxBackoff caps the wait between connection attempts (default 10 s).
	MaxBackoff time.Duration
	// Name is shown as connection_name in the RabbitMQ tools (optional).
	Name string
}

func (o Options) withDefaults() Options {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff <= 0 {
		o.MaxBackoff = 10 * time.Second
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = o.MinBackoff
	}
	return o
}

// Connection keeps one AMQP connection alive. It dials with capped
// exponential backoff and jitter, declares its Topology on every
// (re)connect, watches the connection and redials after a loss until Close.
// Channels are opened on the live connection with Channel. A Connection is
// safe for concurrent use.
type Connection struct {
	url    string
	topo   Topology
	logger *slog.Logger
	opts   Options

	done chan struct{} // closed by Close
	wg   sync.WaitGroup

	mu      sync.Mutex
	conn    *amqp091.Connection // nil while disconnected
	netConn net.Conn            // the socket under conn, for tests
	up      chan struct{}       // closed when conn becomes live; replaced on loss
	lastErr error               // why the connection is down
	closed  bool
}

// Dial connects to url with the default Options; see DialOptions.
func Dial(ctx context.Context, url string, topo Topology, logger *slog.Logger) (*Connection, error) {
	return DialOptions(ctx, url, topo, logger, Options{})
}

// DialOptions connects to url and declares topo, retrying failed dials with
// capped exponential backoff and jitter until it succeeds or ctx ends
// (then it returns the last dial error joined with ctx.Err()). A topology
// that the broker refuses (for example PRECONDITION_FAILED because a queue
// exists with other arguments) is a configuration error and is returned at
// once. After a successful Dial the Connection reconnects by itself after
// any loss, with the same backoff, and declares topo again each time.
// Close must be called to release it.
func DialOptions(ctx context.Context, url string, topo Topology, logger *slog.Logger, opts Options) (*Connection, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Connection{
		url:    url,
		topo:   topo,
		logger: logger.With(slog.String("component", "amqp"), slog.String("url", maskURL(url))),
		opts:   opts.withDefaults(),
		done:   make(chan struct{}),
		up:     make(chan struct{}),
	}
	b := newBackoff(c.opts.MinBackoff, c.opts.MaxBackoff)
	for {
		conn, err := c.connect()
		if err == nil {
			c.wg.Add(1)
			go c.watch(conn)
			return c, nil
		}
		var amqpErr *amqp091.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed {
			return nil, err
		}
		c.logger.WarnContext(ctx, "amqp dial failed", slog.Any("error", err))
		if ctxErr := sleep(ctx, nil, b.next()); ctxErr != nil {
			return nil, errors.Join(ctxErr, err)
		}
	}
}

// connect dials once, declares the topology and publishes the connection.
func (c *Connection) connect() (*amqp091.Connection, error) {
	var sock net.Conn
	cfg := amqp091.Config{
		Heartbeat:  10 * time.Second,
		Locale:     "en_US",
		Properties: amqp091.NewConnectionProperties(),
		Dial: func(network, addr string) (net.Conn, error) {
			conn, err := amqp091.DefaultDial(30*time.Second)(network, addr)
			sock = conn
			return conn, err
		},
	}
	if c.opts.Name != "" {
		cfg.Properties.SetClientConnectionName(c.opts.Name)
	}
	conn, err := amqp091.DialConfig(c.url, cfg)
	if err != nil {
		c.setDown(err)
		return nil, fmt.Errorf("amqp dial %s: %w", maskURL(c.url), err)
	}
	if err := c.declare(conn); err != nil {
		_ = conn.Close()
		c.setDown(err)
		return nil, err
	}

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		_ = conn.Close()
		return nil, ErrClosed
	}
	c.conn, c.netConn, c.lastErr = conn, sock, nil
	close(c.up)
	return conn, nil
}

func (c *Connection) declare(conn *amqp091.Connection) error {
	ch, err := conn.Channel()
	if err != nil {
		return fmt.Errorf("amqp declare topology: open channel: %w", err)
	}
	defer func() { _ = ch.Close() }()
	if err := c.topo.Declare(ch); err != nil {
		return fmt.Errorf("amqp declare topology: %w", err)
	}
	return nil
}

// Redeclare declares the topology again on a channel of the live connection,
// for a client that found an entity missing (deleted by an operator, say)
// while the connection stayed up. It waits for a reconnect like Channel and
// returns the broker's error when the declaration fails.
func (c *Connection) Redeclare(ctx context.Context) error {
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	defer func() { _ = ch.Close() }()
	if err := c.topo.Declare(ch); err != nil {
		return fmt.Errorf("amqp declare topology: %w", err)
	}
	return nil
}

func (c *Connection) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
}

// watch waits for the loss of conn, then redials until it succeeds or the
// Connection is closed. It is the only goroutine a Connection owns.
func (c *Connection) watch(conn *amqp091.Connection) {
	defer c.wg.Done()
	for {
		lost := conn.NotifyClose(make(chan *amqp091.Error, 1))
		select {
		case <-c.done:
			_ = conn.Close()
			return
		case amqpErr := <-lost:
			err := error(errors.New("connection closed"))
			if amqpErr != nil {
				err = amqpErr
			}
			c.mu.Lock()
			c.conn, c.netConn, c.lastErr = nil, nil, err
			c.up = make(chan struct{})
			c.mu.Unlock()
			c.logger.Warn("amqp connection lost, reconnecting", slog.Any("error", err))
		}

		b := newBackoff(c.opts.MinBackoff, c.opts.MaxBackoff)
		for {
			if err := sleep(context.Background(), c.done, b.next()); err != nil {
				return
			}
			next, err := c.connect()
			if err == nil {
				conn = next
				c.logger.Info("amqp connection restored")
				break
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			c.logger.Warn("amqp reconnect failed", slog.Any("error", err))
		}
	}
}

// Ready reports whether the connection is up: nil when it is, otherwise an
// error saying why not (for /readyz). ErrClosed after Close.
func (c *Connection) Ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return ErrClosed
	case c.conn == nil || c.conn.IsClosed():
		if c.lastErr != nil {
			return fmt.Errorf("amqp: not connected: %w", c.lastErr)
		}
		return errors.New("amqp: not connected")
	}
	return nil
}

// Channel opens a channel on the live connection. While the connection is
// down it waits for the reconnect; it returns ctx.Err() if ctx ends first,
// ErrClosed after Close, or the broker's error if opening fails on a live
// connection (for example channel_max reached). The caller owns the channel
// and must close it.
func (c *Connection) Channel(ctx context.Context) (*amqp091.Channel, error) {
	for {
		c.mu.Lock()
		conn, up, closed := c.conn, c.up, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if conn != nil {
			ch, err := conn.Channel()
			if err == nil {
				return ch, nil
			}
			if !conn.IsClosed() && !brokenConnection(err) {
				return nil, fmt.Errorf("amqp open channel: %w", err)
			}
			// The connection is going down: wait for watch to replace it.
			if err := sleep(ctx, c.done, c.opts.MinBackoff); err != nil {
				return nil, fmt.Errorf("amqp open channel: %w", errors.Join(err, ctx.Err()))
			}
			continue
		}
		select {
		case <-up:
		case <-c.done:
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, fmt.Errorf("amqp open channel: %w", ctx.Err())
		}
	}
}

// brokenConnection reports an error from a connection whose socket is gone
// but whose loss the library has not processed yet.
func brokenConnection(err error) bool {
	var netErr net.Error
	return errors.Is(err, amqp091.ErrClosed) || errors.Is(err, io.EOF) || errors.As(err, &netErr)
}

// Close closes the connection, stops reconnecting and waits for its
// goroutine to end. Channels opened from it are closed with it. Calling
// Close again returns ErrClosed.
func (c *Connection) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	close(c.done)
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// breakConnection closes the socket under the live connection, as a network
// failure would. It is a test hook; it reports whether there was a socket.
func (c *Connection) breakConnection() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.netConn == nil {
		return false
	}
	_ = c.netConn.Close()
	return true
}

// backoff yields capped exponential delays with jitter: each delay is drawn
// uniformly from [d/2, d], where d starts at min and doubles up to max.
type backoff struct {
	cur, max time.Duration
}

func newBackoff(min, max time.Duration) *backoff {
	return &backoff{cur: min, max: max}
}

func (b *backoff) next() time.Duration {
	d := b.cur
	b.cur = min(2*b.cur, b.max)
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits for d; it returns early with an error if ctx ends or stop
// (which may be nil) is closed.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-stop:
		return ErrClosed
	}
}

// maskURL hides the password of an AMQP URL for logs and errors.
func maskURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "amqp://(unparsable)"
	}
	return u.Redacted()
}
