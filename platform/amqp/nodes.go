package amqp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/config"
)

// Nodes is the broker an AMQP_URL names: one node, or the nodes of one
// cluster as a comma-separated list of URLs that share their vhost and user
// ("amqp://u:p@10.0.0.1:5672/shop,amqp://u:p@10.0.0.2:5672/shop"). Each
// Dial tries the nodes in turn, starting with the node after the one
// tried last, so a process that lost its node moves on to the next one. Every
// process starts with the first node: a fleet does not spread over the
// cluster by itself (quorum queues do not need it to). A Nodes is safe for
// concurrent use.
type Nodes struct {
	urls []string

	mu   sync.Mutex
	last int // index of the node tried last; -1 before the first dial
	user string
}

// ParseNodes parses raw, one AMQP URL or a comma-separated list of them
// (config.SplitURLs: a comma inside a URL, in a password say, stays in its
// URL). Every entry must parse as an amqp:// or amqps:// URI, and every entry
// must name the vhost and the user of the first. The error says which entry
// is wrong and why, with passwords masked.
func ParseNodes(raw string) (*Nodes, error) {
	entries := config.SplitURLs(raw)
	var first amqp091.URI
	for i, e := range entries {
		where := ""
		if len(entries) > 1 {
			where = fmt.Sprintf("entry %d of %d: ", i+1, len(entries))
		}
		if strings.HasSuffix(e, ",") {
			return nil, fmt.Errorf("%s%q ends with a comma: an empty entry", where, config.MaskURL(e))
		}
		uri, err := amqp091.ParseURI(e)
		if err != nil {
			if ue := (*url.Error)(nil); errors.As(err, &ue) {
				err = ue.Err // without the URL, which may hold a password
			}
			return nil, fmt.Errorf("%s%q is not an AMQP URL such as amqp://user:password@host:5672/vhost (%v)",
				where, config.MaskURL(e), err)
		}
		if i == 0 {
			first = uri
			continue
		}
		if uri.Vhost != first.Vhost || uri.Username != first.Username {
			return nil, fmt.Errorf("%s%q has vhost %q and user %q, entry 1 vhost %q and user %q: "+
				"the nodes of one list are one cluster, with one vhost and one user",
				where, config.MaskURL(e), uri.Vhost, uri.Username, first.Vhost, first.Username)
		}
	}
	return &Nodes{urls: entries, last: -1, user: first.Username}, nil
}

// User returns the broker user every node is dialed as (guest when the URLs
// name none).
func (n *Nodes) User() string { return n.user }

// Len returns the number of nodes, at least 1.
func (n *Nodes) Len() int { return len(n.urls) }

// String returns the nodes as configured, each password masked.
func (n *Nodes) String() string { return config.MaskURL(strings.Join(n.urls, ",")) }

// next returns the URL of the node after the one tried last (the first node
// at the first call) and records it as tried.
func (n *Nodes) next() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.last = (n.last + 1) % len(n.urls)
	return n.urls[n.last]
}

// Dial opens a connection with cfg to the first node that accepts, trying
// each node once in turn, starting with the node after the one tried last
// (the first node at the first call), and stops trying once ctx ends. It
// returns the connection and its node's URL with the password masked, for a
// log line. When every node fails, the error joins one "amqp dial <masked
// node>: <cause>" per node tried, in order, and ctx's error if it ended; for
// a single node it is that one error.
//
// With cfg.Dial nil, each node's TCP connect and handshake get perNode at
// most (30 s when perNode <= 0), so that a silent node leaves time for the
// next, and ctx's end cuts them. A cfg.Dial of the caller's is used as it is
// (perNode unused). A connection is returned only if ctx had not ended when
// it opened.
func (n *Nodes) Dial(ctx context.Context, perNode time.Duration, cfg amqp091.Config) (*amqp091.Connection, string, error) {
	var cut func() bool // unhooks the socket of the node being tried from ctx
	defer func() {
		if cut != nil {
			cut()
		}
	}()
	if perNode <= 0 {
		perNode = dialTimeout
	}
	if cfg.Dial == nil {
		cfg.Dial = func(network, addr string) (net.Conn, error) {
			deadline := time.Now().Add(perNode)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			conn, err := (&net.Dialer{Deadline: deadline}).DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			if cut != nil {
				cut()
			}
			cut = context.AfterFunc(ctx, func() { _ = conn.Close() })
			return conn, conn.SetDeadline(deadline) // cleared once the connection is open
		}
	}
	var errs []error
	for range n.urls {
		if err := ended(ctx); err != nil {
			break
		}
		node := n.next()
		conn, err := amqp091.DialConfig(node, cfg)
		if err == nil {
			if cut == nil || cut() {
				cut = nil
				return conn, config.MaskURL(node), nil
			}
			// ctx ended as the connection opened: its socket is closed.
			cut = nil
			_ = conn.Close()
			err = ctx.Err()
		}
		errs = append(errs, fmt.Errorf("amqp dial %s: %w", config.MaskURL(node), err))
	}
	// A node cut by ctx fails with whatever the library makes of a closed
	// socket ("username or password not allowed" during SASL): say why.
	if err := ended(ctx); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 1 {
		return nil, "", errs[0]
	}
	return nil, "", errors.Join(errs...)
}

// ended returns ctx's error, or DeadlineExceeded once its deadline has passed:
// a socket's deadline may be ctx's, and pass just before ctx's timer fires.
func ended(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if d, ok := ctx.Deadline(); ok && !time.Now().Before(d) {
		return context.DeadlineExceeded
	}
	return nil
}
