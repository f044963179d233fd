package amqp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/backoff"
	"example.com/shop/platform/config"
	"example.com/shop/platform/metrics"
)

// ErrClosed is returned by Connection methods after Close.
var ErrClosed = errors.New("amqp: connection manager closed")

// ErrBlocked means the broker blocks the connection (connection.blocked,
// sent while a memory or disk alarm is on and the connection publishes): it
// reads nothing from it until the alarm clears. Errors that wrap it name the
// broker's reason ("low on memory", "low on disk space") and how long the
// block has lasted.
var ErrBlocked = errors.New("connection blocked by the broker")

// DefaultCloseTimeout is Options.CloseTimeout's default: Close returns
// within about this long whatever the broker does.
const DefaultCloseTimeout = 5 * time.Second

// DefaultHeartbeat is Options.Heartbeat's default: a frozen consumer's
// deliveries go back to its queue within 3 × 5 s = 15 s.
const DefaultHeartbeat = 5 * time.Second

// dialTimeout bounds the TCP connect and the AMQP handshake of one attempt.
const dialTimeout = 30 * time.Second

// Options tunes a Connection. The zero value gives the defaults.
type Options struct {
	// MinBackoff is the first nominal wait between connection attempts
	// (default 100 ms). It doubles on each failure up to MaxBackoff; each
	// wait is drawn within ±50% of the nominal one (package backoff).
	MinBackoff time.Duration
	// MaxBackoff caps the nominal wait between connection attempts (default 10 s).
	MaxBackoff time.Duration
	// Name is shown as connection_name in the RabbitMQ tools and labels the
	// connection's metric (optional).
	Name string
	// CloseTimeout bounds Close (default DefaultCloseTimeout, 5 s): the
	// connection.close handshake gets this long, then the socket is closed,
	// which ends every write and call still waiting on it, so Close returns
	// about CloseTimeout after it was called at the latest, whatever the
	// broker does (it may read nothing: a resource alarm, a stalled
	// network). While the broker blocks the connection the handshake cannot
	// complete and the socket is closed at once.
	CloseTimeout time.Duration
	// RedeclareInterval is how often the topology is declared again while
	// connected (default 5 s; negative: never), so that an entity deleted by
	// hand (a queue, an exchange and with it its bindings) is back within
	// one interval even when no call of this process fails on it. Every
	// declaration is idempotent.
	RedeclareInterval time.Duration
	// Heartbeat is the heartbeat timeout the connection proposes, whole
	// seconds (default DefaultHeartbeat, 5 s; less than 1 s means the
	// default; a heartbeat=N in the URL takes precedence). The broker
	// agrees on the lower of it and its own heartbeat setting (RabbitMQ's
	// default is 60 s); each side sends a heartbeat frame when it has sent
	// nothing for half of it. RabbitMQ closes a connection on which it has
	// received nothing for 2 to 3 heartbeat timeouts (it looks every
	// timeout and gives up at the second look in a row without data), and
	// requeues the connection's unacknowledged deliveries: those of a frozen
	// consumer (SIGSTOP, a stalled VM) reach another consumer at most
	// 3 × Heartbeat after it froze. This side gives up on a broker it has
	// heard nothing from for 1.5 × Heartbeat.
	Heartbeat time.Duration
	// Registerer, when set, gets the gauge amqp_connection_blocked{connection}:
	// 1 while the broker blocks the connection, else 0. A collector already
	// registered by another Connection is shared.
	Registerer prometheus.Registerer
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
	if o.CloseTimeout <= 0 {
		o.CloseTimeout = DefaultCloseTimeout
	}
	if o.RedeclareInterval == 0 {
		o.RedeclareInterval = 5 * time.Second
	}
	if o.Heartbeat < time.Second {
		o.Heartbeat = DefaultHeartbeat
	}
	return o
}

// Connection keeps one AMQP connection alive. It dials with capped
// exponential backoff and jitter, declares its Topology on every
// (re)connect, watches the connection and redials after a loss until Close.
// Channels are opened on the live connection with Channel. A Connection is
// safe for concurrent use.
//
// It listens for connection.blocked: while the broker blocks the connection
// (a resource alarm), Ready reports ErrBlocked with the reason, the gauge
// amqp_connection_blocked is 1, and one WARN line is logged when the block
// starts and one when it ends (with blocked_ms). The broker blocks only
// connections that publish, so a process that consumes and publishes should
// use two Connections, or its acks stall during an alarm.
type Connection struct {
	nodes   *Nodes
	topo    Topology
	logger  *slog.Logger
	opts    Options
	blocked prometheus.Gauge

	done chan struct{} // closed by Close
	// closing ends when Close is called (with done), for waits that take a context.
	closing     context.Context
	stopClosing context.CancelFunc
	wg          sync.WaitGroup
	bg          sync.WaitGroup // broker calls left behind by a caller whose ctx ended

	mu      sync.Mutex
	conn    *amqp091.Connection // nil while disconnected
	netConn net.Conn            // the socket under conn
	dialing net.Conn            // the socket of a connect in progress, for Close to cut
	up      chan struct{}       // closed when conn becomes live; replaced on loss
	lastErr error               // why the connection is down
	closed  bool
	// blockReason is the broker's reason while it blocks conn, else "";
	// unblocked is closed while conn is not blocked.
	blockReason  string
	blockedSince time.Time
	unblocked    chan struct{}
}

// URLFromEnv returns the broker URL in key, def when it is unset: one AMQP URL,
// or the nodes of one cluster as a comma-separated list of them (see Nodes).
// It records a *config.VarError on env for a value that ParseNodes refuses (an
// entry that is no amqp:// or amqps:// URI, entries with different vhosts or
// users; the message names the entry), so that a binary refuses it with its
// other configuration errors, before it starts anything. The recorded message
// masks passwords.
func URLFromEnv(env *config.Env, key, def string) string {
	raw := env.String(key, def)
	if _, err := ParseNodes(raw); err != nil {
		env.Errorf(key, "%v", err)
	}
	return raw
}

// HeartbeatFromEnv returns the heartbeat timeout in key (Options.Heartbeat),
// DefaultHeartbeat when it is unset. It records a *config.VarError on env
// for a value that is not a Go duration of whole seconds from 1s to 65535s
// (the protocol's unit and range).
func HeartbeatFromEnv(env *config.Env, key string) time.Duration {
	d := env.PositiveDuration(key, DefaultHeartbeat)
	if d%time.Second != 0 || d > math.MaxUint16*time.Second {
		env.Errorf(key, "%s must be whole seconds from 1s to 65535s", d)
		return DefaultHeartbeat
	}
	return d
}

// Dial connects to url (one AMQP URL or a list of nodes, see Nodes) with the
// default Options; see DialOptions.
func Dial(ctx context.Context, url string, topo Topology, logger *slog.Logger) (*Connection, error) {
	return DialOptions(ctx, url, topo, logger, Options{})
}

// DialOptions connects to url and declares topo, retrying failed dials with
// capped exponential backoff and jitter until it succeeds or ctx ends: then
// it returns at once, a dial or handshake under way cut, with ctx.Err()
// joined with the last dial error. url is one
// AMQP URL or the comma-separated URLs of a cluster's nodes (ParseNodes; a
// url it refuses is returned at once). Every connect, the first and each
// reconnect, tries the nodes in turn, starting with the node after the one
// tried last, and falls through to the next node at once when a dial fails;
// the backoff applies once every node has failed. Each connect logs INFO
// "amqp connected" with the node's URL, password masked. A topology
// that the broker refuses (for example PRECONDITION_FAILED because a queue
// exists with other arguments) is a configuration error and is returned at
// once. After a successful Dial the Connection reconnects by itself after
// any loss, with the same backoff, and declares topo again each time.
// Close must be called to release it.
func DialOptions(ctx context.Context, url string, topo Topology, logger *slog.Logger, opts Options) (*Connection, error) {
	if err := topo.Validate(); err != nil {
		return nil, err
	}
	nodes, err := ParseNodes(url)
	if err != nil {
		return nil, fmt.Errorf("amqp: %w", err)
	}
	c, err := newConnection(nodes, topo, logger, opts)
	if err != nil {
		return nil, err
	}
	// ctx ending cuts a connect under way, on whichever node, as Close does.
	cut := make(chan struct{})
	stopCut := context.AfterFunc(ctx, func() { defer close(cut); _ = c.Close() })
	giveUp := func(err error) (*Connection, error) {
		if stopCut() {
			_ = c.Close()
		} else {
			<-cut
		}
		return nil, err
	}
	b := backoff.New(c.opts.MinBackoff, c.opts.MaxBackoff)
	for {
		conn, sock, blocks, err := c.connect()
		if err == nil {
			// Only once the AfterFunc can no longer call Close: a wg.Add
			// concurrent with Close's wg.Wait is a race.
			if !stopCut() { // Close has run or runs, with no watch to shut conn down
				<-cut
				c.shut(conn, sock, false)
				return nil, ctx.Err()
			}
			c.wg.Add(1)
			go c.watch(conn, sock, blocks)
			if c.opts.RedeclareInterval > 0 {
				c.wg.Add(1)
				go c.redeclareEvery(c.opts.RedeclareInterval)
			}
			return c, nil
		}
		var amqpErr *amqp091.Error
		if errors.As(err, &amqpErr) && amqpErr.Code == amqp091.PreconditionFailed {
			return giveUp(err)
		}
		if ctx.Err() == nil {
			c.logger.WarnContext(ctx, "amqp dial failed", slog.Any("error", err))
		}
		if ctxErr := backoff.Sleep(ctx, b.NextBackOff()); ctxErr != nil {
			return giveUp(errors.Join(ctxErr, err))
		}
	}
}

// newConnection returns a Connection to nodes, not yet connected, with its
// blocked gauge registered (an error when the registry refuses it).
func newConnection(nodes *Nodes, topo Topology, logger *slog.Logger, opts Options) (*Connection, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	c := &Connection{
		nodes:     nodes,
		topo:      topo,
		logger:    logger.With(slog.String("component", "amqp"), slog.String("url", nodes.String())),
		opts:      opts.withDefaults(),
		done:      make(chan struct{}),
		up:        make(chan struct{}),
		unblocked: make(chan struct{}),
	}
	close(c.unblocked)
	c.closing, c.stopClosing = context.WithCancel(context.Background())
	gauge, err := blockedGauge(c.opts.Registerer, c.opts.Name)
	if err != nil {
		return nil, err
	}
	c.blocked = gauge
	return c, nil
}

// connect dials (each node once at most, Nodes.Dial), declares the
// topology, publishes the connection and the socket under it and logs
// "amqp connected" with the node. blocks receives the connection's
// connection.blocked notifications. Close cuts a connect in progress: the
// dial ends with Close, and Close closes the socket of a handshake or a
// declaration under way.
func (c *Connection) connect() (conn *amqp091.Connection, sock net.Conn, blocks chan amqp091.Blocking, err error) {
	cfg := amqp091.Config{
		Heartbeat:  c.opts.Heartbeat,
		Locale:     "en_US",
		Properties: amqp091.NewConnectionProperties(),
		Dial:       c.dialer(&sock),
	}
	defer func() {
		c.mu.Lock()
		c.dialing = nil
		c.mu.Unlock()
	}()
	if c.opts.Name != "" {
		cfg.Properties.SetClientConnectionName(c.opts.Name)
	}
	conn, node, err := c.nodes.Dial(c.closing, 0, cfg)
	if err != nil {
		c.setDown(err)
		if c.isClosed() {
			return nil, nil, nil, ErrClosed
		}
		return nil, nil, nil, err
	}
	blocks = conn.NotifyBlocked(make(chan amqp091.Blocking, 4))
	if err := c.declare(conn); err != nil {
		c.shut(conn, sock, false)
		c.setDown(err)
		if c.isClosed() {
			return nil, nil, nil, ErrClosed
		}
		return nil, nil, nil, err
	}

	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		c.shut(conn, sock, false)
		return nil, nil, nil, ErrClosed
	}
	c.conn, c.netConn, c.lastErr = conn, sock, nil
	close(c.up)
	c.mu.Unlock()
	c.logger.Info("amqp connected", slog.String("node", node))
	return conn, sock, blocks, nil
}

// dialer is connect's dial function: a TCP dial that Close cuts, with a deadline
// for the handshake (as amqp091.DefaultDial; the library clears it once the
// connection is open). It keeps the socket in *sock and in c.dialing, so that
// Close can end a handshake or a declaration under way.
func (c *Connection) dialer(sock *net.Conn) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		d := net.Dialer{Timeout: dialTimeout}
		conn, err := d.DialContext(c.closing, network, addr)
		if err != nil {
			return nil, err
		}
		if err := conn.SetDeadline(time.Now().Add(dialTimeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed {
			_ = conn.Close()
			return nil, ErrClosed
		}
		*sock, c.dialing = conn, conn
		return conn, nil
	}
}

// shut closes conn, whose socket is sock, and returns once the library has
// released it, about CloseTimeout later at the latest (Options.CloseTimeout).
// It sends connection.close and waits CloseTimeout for connection.close-ok,
// then closes the socket: a write stuck on a socket the broker does not read
// and every call waiting for an answer then fail, and the library shuts the
// connection down. The library's own bound is not enough: CloseDeadline
// sets a deadline on the socket, but every frame the broker sends (a
// heartbeat, which it sends even while it reads nothing) moves the read
// deadline 30 s on. When blocked, the broker reads nothing until its alarm
// clears, so no close-ok can come: the socket is closed at once.
//
// Nothing published is lost by the cut: a message is only counted once the
// broker confirmed it, and whatever was still in the socket is published
// again by its caller (at least once, docs/architecture.md, rule 2).
func (c *Connection) shut(conn *amqp091.Connection, sock net.Conn, blocked bool) {
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		_ = conn.CloseDeadline(time.Now().Add(c.opts.CloseTimeout))
	}()
	if !blocked {
		t := time.NewTimer(c.opts.CloseTimeout)
		defer t.Stop()
		select {
		case <-closed:
			return
		case <-t.C:
			c.logger.Warn("amqp connection.close not answered in time; closing the socket",
				slog.Duration("close_timeout", c.opts.CloseTimeout))
		}
	}
	if sock != nil {
		_ = sock.Close()
	}
	<-closed
}

// isClosed reports whether Close has been called.
func (c *Connection) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
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
// returns the broker's error when the declaration fails, or an error
// wrapping ctx.Err() (and ErrBlocked while the broker blocks the connection)
// when ctx ends first; the declaration then finishes in the background.
func (c *Connection) Redeclare(ctx context.Context) error {
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	err = c.await(ctx, func() error {
		defer func() { _ = ch.Close() }()
		return c.topo.Declare(ch)
	})
	if err != nil {
		return fmt.Errorf("amqp declare topology: %w", err)
	}
	return nil
}

func (c *Connection) setDown(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastErr = err
}

// watch waits for the loss of conn (whose socket is sock), then redials
// until it succeeds or the Connection is closed; meanwhile it follows conn's
// blocked state. It is the only long-lived goroutine a Connection owns. On
// Close it closes conn within CloseTimeout (see shut).
func (c *Connection) watch(conn *amqp091.Connection, sock net.Conn, blocks chan amqp091.Blocking) {
	defer c.wg.Done()
	for {
		lost := conn.NotifyClose(make(chan *amqp091.Error, 1))
	live:
		for {
			select {
			case <-c.done:
				blocked := c.blockedErr() != nil
				c.setBlocked(false, "connection closed")
				c.shut(conn, sock, blocked)
				return
			case b := <-blocks:
				c.setBlocked(b.Active, b.Reason)
			case amqpErr := <-lost:
				err := error(errors.New("connection closed"))
				if amqpErr != nil {
					err = amqpErr
				}
				c.setBlocked(false, "connection lost")
				c.mu.Lock()
				c.conn, c.netConn, c.lastErr = nil, nil, err
				c.up = make(chan struct{})
				c.mu.Unlock()
				c.logger.Warn("amqp connection lost, reconnecting", slog.Any("error", err))
				break live
			}
		}

		b := backoff.New(c.opts.MinBackoff, c.opts.MaxBackoff)
		for {
			if backoff.Sleep(c.closing, b.NextBackOff()) != nil {
				return // closed
			}
			next, nextSock, nextBlocks, err := c.connect()
			if err == nil {
				conn, sock, blocks = next, nextSock, nextBlocks
				break // connect logged "amqp connected" with the node
			}
			if errors.Is(err, ErrClosed) {
				return
			}
			c.logger.Warn("amqp reconnect failed", slog.Any("error", err))
		}
	}
}

// redeclareEvery declares the topology again every interval while the
// connection is up and not blocked, until Close. A failure is logged at WARN
// and tried again at the next tick.
func (c *Connection) redeclareEvery(interval time.Duration) {
	defer c.wg.Done()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-t.C:
		}
		if c.Ready() != nil {
			continue // reconnecting declares it anyway; a blocked broker reads nothing
		}
		ctx, cancel := context.WithTimeout(context.Background(), interval)
		err := c.Redeclare(ctx)
		cancel()
		if err != nil && !errors.Is(err, ErrClosed) {
			c.logger.Warn("amqp periodic topology declaration failed", slog.Any("error", err))
		}
	}
}

// setBlocked records a change of the blocked state, logs it once at WARN and
// sets the gauge. reason is the broker's when a block starts and says why it
// ended otherwise ("" for connection.unblocked).
func (c *Connection) setBlocked(active bool, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	was := c.blockReason != ""
	switch {
	case active && !was:
		if reason == "" {
			reason = "no reason given"
		}
		c.blockReason, c.blockedSince = reason, time.Now()
		c.unblocked = make(chan struct{})
		c.blocked.Set(1)
		c.logger.Warn("amqp connection blocked by the broker; publishing waits", slog.String("reason", reason))
	case !active && was:
		attrs := []any{slog.String("reason", c.blockReason), slog.Int64("blocked_ms", time.Since(c.blockedSince).Milliseconds())}
		if reason != "" {
			attrs = append(attrs, slog.String("ended_by", reason))
		}
		c.blockReason = ""
		close(c.unblocked)
		c.blocked.Set(0)
		c.logger.Warn("amqp connection unblocked", attrs...)
	}
}

// blockedErr returns an error wrapping ErrBlocked with the reason and the
// duration of the current block, or nil when the connection is not blocked.
func (c *Connection) blockedErr() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blockedErrLocked()
}

func (c *Connection) blockedErrLocked() error {
	if c.blockReason == "" {
		return nil
	}
	return fmt.Errorf("%w: %s (for %d ms)", ErrBlocked, c.blockReason, time.Since(c.blockedSince).Milliseconds())
}

// waitUnblocked returns nil at once when the broker does not block the
// connection, else waits until it unblocks it; when ctx ends first it
// returns an error wrapping ErrBlocked (with the reason) and ctx.Err().
func (c *Connection) waitUnblocked(ctx context.Context) error {
	c.mu.Lock()
	unblocked := c.unblocked
	c.mu.Unlock()
	select {
	case <-unblocked:
		return nil
	default:
	}
	select {
	case <-unblocked:
		return nil
	case <-ctx.Done():
		if err := c.blockedErr(); err != nil {
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return ctx.Err()
	case <-c.done:
		return ErrClosed
	}
}

// await runs fn, a call to the broker, and waits for it until ctx ends. A
// broker that blocks the connection or stopped answering cannot make the
// caller wait past ctx: await then returns ctx.Err() (wrapped with
// ErrBlocked and its reason while the connection is blocked) and leaves fn
// to finish in the background, which it does when the broker answers or the
// connection closes (Close waits for it, after closing the socket).
func (c *Connection) await(ctx context.Context, fn func() error) error {
	done := make(chan error, 1)
	if !c.background(func() { done <- fn() }) {
		return ErrClosed
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		if err := c.blockedErr(); err != nil {
			return fmt.Errorf("%w: %w", err, ctx.Err())
		}
		return ctx.Err()
	}
}

// background runs fn in a goroutine that Close waits for. It reports false,
// and runs nothing, after Close.
func (c *Connection) background(fn func()) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.bg.Add(1)
	go func() {
		defer c.bg.Done()
		fn()
	}()
	return true
}

// closeChannel closes ch without waiting: on a blocked connection
// channel.close is never answered until the alarm clears.
func (c *Connection) closeChannel(ch *amqp091.Channel) {
	// After Close the connection takes its channels with it.
	c.background(func() { _ = ch.Close() })
}

// Ready reports whether the connection is up and can publish: nil when it
// can, otherwise an error saying why not (for /readyz): ErrClosed after
// Close, "amqp: not connected" with the last error while it reconnects, or
// an error wrapping ErrBlocked with the broker's reason and the block's
// duration in ms while the broker blocks it (resource alarm).
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
	if err := c.blockedErrLocked(); err != nil {
		return fmt.Errorf("amqp: %w", err)
	}
	return nil
}

// Channel opens a channel on the live connection. While the connection is
// down it waits for the reconnect; it returns ctx.Err() if ctx ends first
// (wrapped with ErrBlocked while the broker blocks the connection, which
// leaves channel.open unanswered), ErrClosed after Close, or the broker's
// error if opening fails on a live connection (for example channel_max
// reached). The caller owns the channel and must close it.
func (c *Connection) Channel(ctx context.Context) (*amqp091.Channel, error) {
	for {
		c.mu.Lock()
		conn, up, closed := c.conn, c.up, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if conn != nil {
			ch, err := c.open(ctx, conn)
			if err == nil {
				return ch, nil
			}
			if ctx.Err() != nil {
				return nil, fmt.Errorf("amqp open channel: %w", err)
			}
			if !conn.IsClosed() && !brokenConnection(err) {
				return nil, fmt.Errorf("amqp open channel: %w", err)
			}
			// The connection is going down: wait for watch to replace it.
			if err := c.sleep(ctx, c.opts.MinBackoff); err != nil {
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

// open opens a channel on conn within ctx; a channel that opens after ctx
// ended is closed.
func (c *Connection) open(ctx context.Context, conn *amqp091.Connection) (*amqp091.Channel, error) {
	var (
		mu        sync.Mutex
		ch        *amqp091.Channel
		abandoned bool
	)
	err := c.await(ctx, func() error {
		opened, err := conn.Channel()
		mu.Lock()
		defer mu.Unlock()
		if err == nil && abandoned {
			c.closeChannel(opened)
			return nil
		}
		ch = opened
		return err
	})
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		abandoned = true
		if ch != nil { // opened just as ctx ended
			c.closeChannel(ch)
		}
		return nil, err
	}
	return ch, nil
}

// brokenConnection reports an error from a connection whose socket is gone
// but whose loss the library has not processed yet.
func brokenConnection(err error) bool {
	var netErr net.Error
	return errors.Is(err, amqp091.ErrClosed) || errors.Is(err, io.EOF) || errors.As(err, &netErr)
}

// Close closes the connection, stops reconnecting and waits for its
// goroutines to end. It returns within about Options.CloseTimeout whatever
// the broker does: the connection.close handshake is given that long (none
// while the broker blocks the connection), then the socket is closed, which
// ends every write and call still waiting on it. A reconnect in progress is
// cut at once. Channels opened from it are closed with it; nothing the
// broker had not confirmed counts as published. Calling Close again returns
// ErrClosed.
func (c *Connection) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return ErrClosed
	}
	c.closed = true
	close(c.done)
	c.stopClosing() // ends a dial in progress
	if c.dialing != nil {
		// A handshake or a declaration under way: the connection would be
		// closed as soon as it is up.
		_ = c.dialing.Close()
	}
	c.mu.Unlock()
	c.wg.Wait() // watch closed the connection, within CloseTimeout
	c.bg.Wait() // so the calls left behind have returned
	return nil
}

// CloseAll closes conns (nil ones are skipped) in parallel and returns when
// every one is closed: within about the longest of their CloseTimeouts,
// not their sum, so that a process with several connections still stops
// within one CloseTimeout whatever the broker does. It returns their
// errors joined (ErrClosed for one already closed).
func CloseAll(conns ...*Connection) error {
	errs := make([]error, len(conns))
	var wg sync.WaitGroup
	for i, c := range conns {
		if c != nil {
			wg.Go(func() { errs[i] = c.Close() })
		}
	}
	wg.Wait()
	return errors.Join(errs...)
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

// sleep waits for d as backoff.Sleep does, and returns ErrClosed early once Close
// has been called.
func (c *Connection) sleep(ctx context.Context, d time.Duration) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.closing, func() { cancel(ErrClosed) })
	defer stop()
	if err := backoff.Sleep(ctx, d); err != nil {
		return context.Cause(ctx)
	}
	return nil
}

// blockedGauge returns the amqp_connection_blocked gauge of the connection
// named name, registered on reg (nil: a gauge nobody exports).
func blockedGauge(reg prometheus.Registerer, name string) (prometheus.Gauge, error) {
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "amqp", Name: "connection_blocked",
		Help: "1 while the broker blocks the connection (memory or disk alarm), else 0.",
	}, []string{"connection"})
	if reg != nil {
		var err error
		if vec, err = metrics.Register(reg, vec); err != nil {
			return nil, fmt.Errorf("amqp connection metrics: %w", err)
		}
	}
	return vec.WithLabelValues(name), nil
}
