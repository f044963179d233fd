package fault

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"sync"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Net is an in-process Toxiproxy server: one TCP proxy per connection path
// (for example "stock-pg": stock serve to PostgreSQL), on which toxics are
// added and removed, or which is disabled (every connection closed, new ones
// refused) and enabled again.
type Net struct {
	srv     *toxiproxy.ApiServer
	mu      sync.Mutex
	proxies map[string]*toxiproxy.Proxy
}

// NewNet returns a Net with no proxy. Toxiproxy's toxics log through
// zerolog's global logger; NewNet silences it, as the proxies' own logger is.
func NewNet() *Net {
	zerolog.SetGlobalLevel(zerolog.Disabled)
	return &Net{
		srv:     toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop()),
		proxies: map[string]*toxiproxy.Proxy{},
	}
}

// Route starts proxy name on a free 127.0.0.1 port towards the host:port of
// rawURL (a postgres:// or amqp:// URL) and returns rawURL with its host
// replaced by the proxy's address.
func (n *Net) Route(name, rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("route %s: %q is not a URL with a host", name, rawURL)
	}
	upstream := u.Host
	if u.Port() == "" {
		port := map[string]string{"postgres": "5432", "postgresql": "5432", "amqp": "5672"}[u.Scheme]
		upstream = u.Hostname() + ":" + port
	}
	p := toxiproxy.NewProxy(n.srv, name, "127.0.0.1:0", upstream)
	if err := n.srv.Collection.Add(p, true); err != nil {
		return "", fmt.Errorf("route %s: %w", name, err)
	}
	n.mu.Lock()
	n.proxies[name] = p
	n.mu.Unlock()
	u.Host = p.Listen
	return u.String(), nil
}

// Names returns the names of the proxies.
func (n *Net) Names() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	names := make([]string, 0, len(n.proxies))
	for name := range n.proxies {
		names = append(names, name)
	}
	return names
}

func (n *Net) proxy(name string) (*toxiproxy.Proxy, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	p := n.proxies[name]
	if p == nil {
		return nil, fmt.Errorf("no proxy %q", name)
	}
	return p, nil
}

// Toxic adds a Toxiproxy toxic of kind ("latency", "timeout", "reset_peer",
// "bandwidth", "slicer", ...) with attributes attrs to both directions of
// proxy name, and returns the function that removes it again. Attributes
// are Toxiproxy's: latency and jitter in ms, timeout in ms (0: hold the data
// for ever), rate in KB/s.
func (n *Net) Toxic(name, kind string, attrs map[string]any) (remove func(), err error) {
	p, err := n.proxy(name)
	if err != nil {
		return nil, err
	}
	var added []string
	for _, stream := range []string{"upstream", "downstream"} {
		tname := kind + "_" + stream
		body, _ := json.Marshal(map[string]any{"name": tname, "type": kind, "stream": stream, "toxicity": 1.0, "attributes": attrs})
		if _, err := p.Toxics.AddToxicJson(bytes.NewReader(body)); err != nil {
			for _, t := range added {
				_ = p.Toxics.RemoveToxic(context.Background(), t)
			}
			return nil, fmt.Errorf("toxic %s on %s: %w", kind, name, err)
		}
		added = append(added, tname)
	}
	return func() {
		for _, t := range added {
			_ = p.Toxics.RemoveToxic(context.Background(), t)
		}
	}, nil
}

// Disable stops proxy name: its connections are closed and new ones refused
// until Enable.
func (n *Net) Disable(name string) error {
	p, err := n.proxy(name)
	if err != nil {
		return err
	}
	p.Stop()
	return nil
}

// Enable starts proxy name again on the same address.
func (n *Net) Enable(name string) error {
	p, err := n.proxy(name)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil && err != toxiproxy.ErrProxyAlreadyStarted {
		return fmt.Errorf("enable %s: %w", name, err)
	}
	return nil
}

// Close stops every proxy.
func (n *Net) Close() {
	_ = n.srv.Collection.Clear()
}
