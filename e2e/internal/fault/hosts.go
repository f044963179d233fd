package fault

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Hosts are network namespaces joined by one bridge: each is a host with its own
// address and name, which every host resolves (its /etc/netns/<ns>/hosts), and
// which the test's own namespace reaches through the bridge. Cut takes a host's
// link down: a real partition, from the other hosts and from every client. One
// more host, Control, bears this machine's host name, for the tools that
// connect to the others (rabbitmqctl), whatever host is cut off. Creating them
// needs root (ip netns, ip link).
type Hosts struct {
	id      string
	bridge  string
	All     []Host
	Control Host
	// Clients is the address this machine's own processes (the shop's, the
	// ledger's) reach the hosts from: the bridge's.
	Clients string
}

// Host is one of Hosts.
type Host struct {
	NS   string // network namespace
	Name string // host name: the namespace's
	IP   string // its address, e.g. 10.93.17.1
	link string // the bridge's end of its link
}

// NewHosts creates n hosts on a bridge of a random 10.x.y.0/24 network.
func NewHosts(ctx context.Context, n int) (*Hosts, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("hosts: network namespaces need root")
	}
	sweep(ctx)
	var b [3]byte
	_, _ = rand.Read(b[:])
	h := &Hosts{id: hex.EncodeToString(b[:]), bridge: "shb" + hex.EncodeToString(b[:])}
	net := fmt.Sprintf("10.%d.%d.", 16+int(b[0])%200, b[1])
	self, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("hosts: %w", err)
	}
	host := func(i int, name string) Host {
		return Host{NS: fmt.Sprintf("shop%s-%d", h.id, i), Name: name, IP: net + strconv.Itoa(i),
			link: fmt.Sprintf("sh%s-%d", h.id, i)}
	}
	h.Control = host(100, self)
	h.Clients = net + "254"
	hostsFile := fmt.Sprintf("127.0.0.1 localhost\n%s %s\n", h.Control.IP, self)
	for i := range n {
		h.All = append(h.All, host(i+1, fmt.Sprintf("shop%s-%d", h.id, i+1)))
		hostsFile += fmt.Sprintf("%s %s\n", h.All[i].IP, h.All[i].Name)
	}
	cmds := [][]string{
		{"ip", "link", "add", h.bridge, "type", "bridge"},
		{"ip", "addr", "add", net + "254/24", "dev", h.bridge},
		{"ip", "link", "set", h.bridge, "up"},
	}
	for _, host := range append(h.All, h.Control) {
		cmds = append(cmds,
			[]string{"ip", "netns", "add", host.NS},
			[]string{"ip", "link", "add", host.link, "type", "veth", "peer", "name", host.link + "n", "netns", host.NS},
			[]string{"ip", "link", "set", host.link, "master", h.bridge, "up"},
			[]string{"ip", "netns", "exec", host.NS, "ip", "link", "set", "lo", "up"},
			[]string{"ip", "netns", "exec", host.NS, "ip", "addr", "add", host.IP + "/24", "dev", host.link + "n"},
			[]string{"ip", "netns", "exec", host.NS, "ip", "link", "set", host.link + "n", "up"},
		)
	}
	for _, host := range append(h.All, h.Control) {
		dir := filepath.Join("/etc/netns", host.NS)
		if err := errors.Join(os.MkdirAll(dir, 0o755), os.WriteFile(filepath.Join(dir, "hosts"), []byte(hostsFile), 0o644)); err != nil {
			h.Close()
			return nil, fmt.Errorf("hosts: %w", err)
		}
	}
	// A firewall that drops forwarded traffic (Docker's sets FORWARD to DROP,
	// and bridged frames pass through it) would cut the hosts off each other.
	if _, err := exec.LookPath("iptables"); err == nil {
		cmds = append(cmds, append([]string{"iptables", "-I"}, h.forward()...))
	}
	for _, c := range cmds {
		if err := run(ctx, c...); err != nil {
			h.Close()
			return nil, err
		}
	}
	return h, nil
}

// forward is the iptables rule, after its verb, that lets the bridge forward
// between the hosts.
func (h *Hosts) forward() []string {
	return []string{"FORWARD", "-i", h.bridge, "-o", h.bridge, "-j", "ACCEPT"}
}

// Cut takes host's link to the bridge down: nothing reaches it or leaves it.
func (h *Hosts) Cut(ctx context.Context, host Host) error {
	return run(ctx, "ip", "link", "set", host.link, "down")
}

// Heal brings host's link to the bridge up again.
func (h *Hosts) Heal(ctx context.Context, host Host) error {
	return run(ctx, "ip", "link", "set", host.link, "up")
}

// Drop makes host drop every packet it would send to the address ip (a
// blackhole route in its namespace): what reaches host from ip gets no
// answer, and host reaches nothing at ip. Drop host's packets to another host
// and that host's to it for a two-way partition between them; to Clients to
// cut every client (this machine) from it. Undrop lifts it.
func (h *Hosts) Drop(ctx context.Context, host Host, ip string) error {
	return run(ctx, "ip", "netns", "exec", host.NS, "ip", "route", "add", "blackhole", ip+"/32")
}

// Undrop removes the route Drop added; no route is not an error.
func (h *Hosts) Undrop(ctx context.Context, host Host, ip string) error {
	err := run(ctx, "ip", "netns", "exec", host.NS, "ip", "route", "del", "blackhole", ip+"/32")
	if err != nil && strings.Contains(err.Error(), "No such process") {
		return nil
	}
	return err
}

// Close kills what still runs in the hosts (an epmd outlives its node), then
// removes the namespaces, their links, the bridge and the hosts files.
func (h *Hosts) Close() {
	ctx := context.Background()
	for _, host := range append(h.All, h.Control) {
		if host.NS == "" {
			continue
		}
		if out, err := exec.CommandContext(ctx, "ip", "netns", "pids", host.NS).Output(); err == nil {
			for _, f := range strings.Fields(string(out)) {
				if pid, err := strconv.Atoi(f); err == nil {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		_ = run(ctx, "ip", "link", "del", host.link)
		_ = run(ctx, "ip", "netns", "del", host.NS)
		os.RemoveAll(filepath.Join("/etc/netns", host.NS))
	}
	if h.bridge != "" {
		_ = run(ctx, "ip", "link", "del", h.bridge)
		_ = run(ctx, append([]string{"iptables", "-D"}, h.forward()...)...)
	}
}

// sweep removes the hosts an earlier run left behind when its test binary died
// before its cleanup (a timeout, a kill): what runs in them, their links, the
// bridges and the hosts files. One drill run at a time uses Hosts on a machine.
func sweep(ctx context.Context) {
	out, _ := exec.CommandContext(ctx, "ip", "netns", "list").Output()
	var stale []Host
	for _, line := range strings.Split(string(out), "\n") {
		if ns, _, _ := strings.Cut(line, " "); strings.HasPrefix(ns, "shop") && strings.Contains(ns, "-") {
			id, n, _ := strings.Cut(strings.TrimPrefix(ns, "shop"), "-")
			stale = append(stale, Host{NS: ns, link: "sh" + id + "-" + n})
		}
	}
	if len(stale) == 0 {
		return
	}
	old := &Hosts{All: stale}
	old.Close()
	links, _ := exec.CommandContext(ctx, "ip", "-br", "link", "show", "type", "bridge").Output()
	for _, line := range strings.Split(string(links), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "shb") {
			(&Hosts{bridge: name}).Close()
		}
	}
}

// run runs a command and returns its output in the error when it fails.
func run(ctx context.Context, args ...string) error {
	if out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
