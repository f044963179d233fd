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
	"sync"
	"syscall"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/testkit"
)

// rabbitBin is where the Debian and RPM packages keep the RabbitMQ scripts
// that run as the calling user (the /usr/sbin wrappers switch to the
// rabbitmq user, whose Erlang cookie is not ours).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// Node is a private RabbitMQ node: its own name, ports, data and log
// directories and Erlang cookie under one temporary directory, and no
// plugin. Node-wide faults (a resource alarm, stop_app) are raised on it,
// never on a shared broker. Nodes started together by StartCluster share a
// cookie and form one cluster.
type Node struct {
	Name    string // e.g. fault-3f2a9c@localhost
	AMQPURL string // amqp://guest:guest@127.0.0.1:<port>/
	dir     string
	host    *Host    // nil: this machine's own network
	control *Host    // where rabbitmqctl runs: nil, this machine's own network
	vars    []string // the node's RABBITMQ_* settings
	cmd     *exec.Cmd
	done    chan struct{}
}

// StartNode starts a private node and waits (up to 90 s) until it accepts
// AMQP connections. Stop it with Stop.
func StartNode(ctx context.Context) (*Node, error) {
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	return startNode(ctx, hex.EncodeToString(cookie), nil, nil, "")
}

// clusterConf is the rabbitmq.conf of StartCluster's nodes: a node cut off
// from the majority pauses until it sees it again, and guest may connect from
// the other hosts.
const clusterConf = "cluster_partition_handling = pause_minority\nloopback_users = none\n"

// StartCluster starts a private node on each of hosts, at once, sharing one
// cookie and clusterConf, and joins every other node to the first (stop_app,
// join_cluster, start_app), so that quorum queues declared from then on get a
// member on each. Stop each with Stop.
func StartCluster(ctx context.Context, hosts *Hosts) ([]*Node, error) {
	cookie := make([]byte, 16)
	_, _ = rand.Read(cookie)
	nodes := make([]*Node, len(hosts.All))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Go(func() {
			nodes[i], errs[i] = startNode(ctx, hex.EncodeToString(cookie), &hosts.All[i], &hosts.Control, clusterConf)
		})
	}
	wg.Wait()
	stopAll := func() {
		for _, node := range nodes {
			if node != nil {
				node.Stop()
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		stopAll()
		return nil, err
	}
	for _, node := range nodes[1:] {
		for _, args := range [][]string{{"stop_app"}, {"join_cluster", nodes[0].Name}, {"start_app"}} {
			if _, err := node.Ctl(ctx, args...); err != nil {
				stopAll()
				return nil, fmt.Errorf("cluster: %s: %w", node.Name, err)
			}
		}
	}
	return nodes, nil
}

// startNode starts a private node with cookie and the rabbitmq.conf conf on
// host, controlled from control (nil: this machine's loopback, for both), and
// waits until it accepts AMQP connections.
func startNode(ctx context.Context, cookie string, host, control *Host, conf string) (*Node, error) {
	dir, err := os.MkdirTemp("", "shop-rabbit-")
	if err != nil {
		return nil, fmt.Errorf("private node: %w", err)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	amqpPort, err1 := testkit.FreePort()
	distPort, err2 := testkit.FreePort()
	if err := errors.Join(err1, err2,
		os.WriteFile(filepath.Join(dir, ".erlang.cookie"), []byte(cookie), 0o400),
		os.WriteFile(filepath.Join(dir, "enabled_plugins"), []byte("[].\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o644)); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("private node: %w", err)
	}
	hostName, ip := "localhost", "127.0.0.1"
	if host != nil {
		hostName, ip = host.Name, host.IP
	}
	n := &Node{
		Name:    "fault-" + hex.EncodeToString(id[:]) + "@" + hostName,
		AMQPURL: fmt.Sprintf("amqp://guest:guest@%s:%d/", ip, amqpPort),
		dir:     dir,
		host:    host,
		control: control,
	}
	n.vars = []string{
		"RABBITMQ_NODENAME=" + n.Name,
		"RABBITMQ_NODE_IP_ADDRESS=" + ip,
		"RABBITMQ_NODE_PORT=" + strconv.Itoa(amqpPort),
		"RABBITMQ_DIST_PORT=" + strconv.Itoa(distPort),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_PLUGINS_EXPAND_DIR=" + filepath.Join(dir, "plugins-expand"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"),
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "pid"),
	}
	if err := n.Start(ctx); err != nil {
		n.Stop()
		return nil, err
	}
	return n, nil
}

// Start starts the node's server (again, after Kill or Shutdown: with its
// data, so a cluster member rejoins its cluster) and waits up to 90 s until
// it accepts AMQP connections.
func (n *Node) Start(ctx context.Context) error {
	cmd := n.command(context.Background(), n.host, "rabbitmq-server")
	cmd.Env = append(n.env(), n.vars...)
	log, err := os.OpenFile(filepath.Join(n.dir, "server.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return fmt.Errorf("private node: %w", err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		log.Close()
		return fmt.Errorf("private node: start: %w", err)
	}
	done := make(chan struct{})
	n.cmd, n.done = cmd, done
	go func() { _ = cmd.Wait(); log.Close(); close(done) }()

	ctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	for {
		conn, err := amqp091.DialConfig(n.AMQPURL, amqp091.Config{Dial: amqp091.DefaultDial(2 * time.Second)})
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-done:
			out, _ := os.ReadFile(filepath.Join(n.dir, "server.log"))
			return fmt.Errorf("private node %s exited while starting:\n%s", n.Name, tailLines(string(out), 30))
		case <-ctx.Done():
			out, _ := os.ReadFile(filepath.Join(n.dir, "server.log"))
			return fmt.Errorf("private node %s: not accepting connections: %w:\n%s", n.Name, ctx.Err(), tailLines(string(out), 30))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Kill sends SIGKILL to the node's processes and waits until they are gone;
// its data stays for Start.
func (n *Node) Kill() {
	if n.cmd == nil {
		return
	}
	_ = syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	<-n.done
}

// Signal sends sig to the node's process group (SIGSTOP freezes the node as
// a stalled machine would, SIGCONT resumes it); a no-op when it is not running.
func (n *Node) Signal(sig syscall.Signal) error {
	if n.cmd == nil {
		return nil
	}
	select {
	case <-n.done:
		return nil
	default:
	}
	if err := syscall.Kill(-n.cmd.Process.Pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("node %s: signal %v: %w", n.Name, sig, err)
	}
	return nil
}

// Running reports whether the node's server was started and has not exited.
func (n *Node) Running() bool {
	if n.done == nil {
		return false
	}
	select {
	case <-n.done:
		return false
	default:
		return true
	}
}

// Shutdown stops the node cleanly (rabbitmqctl shutdown, SIGKILL after 60 s);
// its data stays for Start.
func (n *Node) Shutdown(ctx context.Context) error {
	_, err := n.Ctl(ctx, "shutdown", "--no-wait")
	select {
	case <-n.done:
	case <-time.After(60 * time.Second):
		n.Kill()
	}
	return err
}

// env is the environment of the node's scripts: HOME points at the
// directory holding the node's own Erlang cookie.
func (n *Node) env() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RABBITMQ_") && !strings.HasPrefix(kv, "HOME=") {
			env = append(env, kv)
		}
	}
	return append(env, "HOME="+n.dir)
}

// command returns one of the RabbitMQ scripts with args, run in host (ip
// netns exec) unless it is nil.
func (n *Node) command(ctx context.Context, host *Host, script string, args ...string) *exec.Cmd {
	path := filepath.Join(rabbitBin, script)
	if host == nil {
		return exec.CommandContext(ctx, path, args...)
	}
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", host.NS, path}, args...)...)
}

// Ctl runs `rabbitmqctl -n <node> args...` (up to 60 s) and returns its
// output, or an error with the output when it fails.
func (n *Node) Ctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	cmd := n.command(ctx, n.control, "rabbitmqctl", append([]string{"-n", n.Name}, args...)...)
	cmd.Env = n.env()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("rabbitmqctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return string(out), nil
}

// Stop shuts the node down (rabbitmqctl shutdown, then SIGKILL of its
// process group after 30 s) and removes its directory. It is safe to call
// more than once.
func (n *Node) Stop() {
	if n.dir == "" {
		return
	}
	if n.cmd != nil {
		select {
		case <-n.done:
		default:
			_, _ = n.Ctl(context.Background(), "shutdown", "--no-wait")
			select {
			case <-n.done:
			case <-time.After(30 * time.Second):
			}
			n.Kill()
		}
	}
	os.RemoveAll(n.dir)
	n.dir = ""
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
