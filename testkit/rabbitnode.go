package testkit

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Time limits of a private RabbitMQ node. Booting one takes 8 to 25 s on a
// busy two-core machine, and minutes when every test of the repository runs
// at once.
const (
	nodeBootTimeout = 5 * time.Minute
	nodeCtlTimeout  = 2 * time.Minute
)

// nodeErlArgs keep a private node light on a shared machine: two schedulers
// that sleep instead of spinning when idle.
const nodeErlArgs = "+S 2:2 +sbwt none +sbwtdcpu none +sbwtdio none"

// Memory watermarks that raise and clear a memory alarm: no node runs below
// 0.0000001 of the machine's memory, and 0.4 is RabbitMQ's default.
const (
	alarmWatermark   = "0.0000001"
	defaultWatermark = "0.4"
)

// RabbitNode is a private RabbitMQ node for tests that raise node-wide faults
// (a memory alarm, a broker stop and start), which must never touch
// the shared broker. It runs rabbitmq-server from this machine's RabbitMQ
// installation under t.TempDir(), with a unique node name, free AMQP and
// distribution ports on 127.0.0.1, its own Erlang cookie, no plugins and the
// default guest user. Its durable entities survive Stop and Start.
//
// A RabbitNode is safe for concurrent use; the node is stopped when the test
// that started it ends.
type RabbitNode struct {
	// URL is the AMQP URL of the node's default vhost (guest:guest).
	URL string
	// Name is the Erlang node name, e.g. "t1a2b3c4@localhost".
	Name string

	dir    string
	env    []string
	server string // rabbitmq-server
	ctl    string // rabbitmqctl

	mu   sync.Mutex
	cmd  *exec.Cmd     // nil while stopped
	exit chan struct{} // closed when cmd has exited
}

// StartRabbitNode boots a private RabbitMQ node and waits until it accepts
// AMQP connections, failing t when it cannot (rabbitmq-server missing, no
// boot within 5 minutes; the node's log is then shown). The node is stopped
// when t ends.
func StartRabbitNode(t testing.TB) *RabbitNode {
	t.Helper()
	server, ctl, err := rabbitBinaries()
	if err != nil {
		t.Fatalf("testkit: private RabbitMQ node: %v", err)
	}
	dir := t.TempDir()
	amqpPort, distPort := freePort(t), freePort(t)
	name := "t" + randomHex(t, 6) + "@localhost"
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\nloopback_users = none\n", amqpPort)
	for file, content := range map[string]string{
		"rabbitmq.conf":   conf,
		"enabled_plugins": "[].\n",
		"env.conf":        "", // replaces the machine's rabbitmq-env.conf
	} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o600); err != nil {
			t.Fatalf("testkit: %v", err)
		}
	}
	n := &RabbitNode{
		URL:    fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", amqpPort),
		Name:   name,
		dir:    dir,
		server: server,
		ctl:    ctl,
		env: append(os.Environ(),
			"HOME="+dir, // the node's and rabbitmqctl's Erlang cookie
			"RABBITMQ_CONF_ENV_FILE="+filepath.Join(dir, "env.conf"),
			"RABBITMQ_NODENAME="+name,
			"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
			"RABBITMQ_NODE_PORT="+strconv.Itoa(amqpPort),
			"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
			"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
			"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
			"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
			"RABBITMQ_PLUGINS_EXPAND_DIR="+filepath.Join(dir, "plugins-expand"),
			"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
			"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
			"RABBITMQ_PID_FILE="+filepath.Join(dir, "node.pid"),
			"ERL_EPMD_ADDRESS=127.0.0.1",
			"RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS="+nodeErlArgs,
		),
	}
	t.Cleanup(func() { n.stop(t) })
	n.Start(t)
	return n
}

// rabbitBinaries finds rabbitmq-server and rabbitmqctl: the Debian package's
// own scripts (which do not switch user) first, then those on PATH.
func rabbitBinaries() (server, ctl string, err error) {
	const debian = "/usr/lib/rabbitmq/bin/"
	if _, err := os.Stat(debian + "rabbitmq-server"); err == nil {
		return debian + "rabbitmq-server", debian + "rabbitmqctl", nil
	}
	if server, err = exec.LookPath("rabbitmq-server"); err != nil {
		return "", "", fmt.Errorf("rabbitmq-server is not installed: %w", err)
	}
	if ctl, err = exec.LookPath("rabbitmqctl"); err != nil {
		return "", "", fmt.Errorf("rabbitmqctl is not installed: %w", err)
	}
	return server, ctl, nil
}

// freePort is FreePort, failing t.
func freePort(t testing.TB) int {
	t.Helper()
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Start boots the node when it is stopped and waits until it runs; its
// queues, exchanges and messages from before Stop are back. It fails t when
// the node does not boot within 5 minutes.
func (n *RabbitNode) Start(t testing.TB) {
	t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return
	}
	out, err := os.OpenFile(filepath.Join(n.dir, "server.out"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	defer out.Close()
	cmd := exec.Command(n.server)
	cmd.Env, cmd.Stdout, cmd.Stderr, cmd.Dir = n.env, out, out, n.dir
	if err := cmd.Start(); err != nil {
		t.Fatalf("testkit: start %s: %v", n.server, err)
	}
	exit := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exit) }()
	n.cmd, n.exit = cmd, exit

	ctx, cancel := context.WithTimeout(context.Background(), nodeBootTimeout)
	defer cancel()
	if _, err := n.run(ctx, "wait", "--timeout", strconv.Itoa(int(nodeBootTimeout.Seconds())), filepath.Join(n.dir, "node.pid")); err != nil {
		log, _ := os.ReadFile(filepath.Join(n.dir, "server.out"))
		t.Fatalf("testkit: RabbitMQ node %s did not boot: %v\n%s", n.Name, err, log)
	}
}

// Stop stops the node (rabbitmqctl stop, or a kill of its process when that
// fails) and waits until its process has exited. Connections to it break.
func (n *RabbitNode) Stop(t testing.TB) {
	t.Helper()
	n.stop(t)
}

func (n *RabbitNode) stop(t testing.TB) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), nodeCtlTimeout)
	defer cancel()
	if _, err := n.run(ctx, "stop"); err != nil {
		t.Logf("testkit: rabbitmqctl stop %s: %v; killing its process", n.Name, err)
		_ = n.cmd.Process.Kill()
	}
	select {
	case <-n.exit:
	case <-time.After(nodeCtlTimeout):
		_ = n.cmd.Process.Kill()
		<-n.exit
	}
	n.cmd, n.exit = nil, nil
}

// Alarm raises a memory alarm on the node (vm_memory_high_watermark set far
// below its use): the broker blocks every connection that publishes, until
// ClearAlarm.
func (n *RabbitNode) Alarm(t testing.TB) {
	t.Helper()
	n.Ctl(t, "set_vm_memory_high_watermark", alarmWatermark)
}

// ClearAlarm restores the default memory watermark (0.4), which clears the
// alarm of Alarm.
func (n *RabbitNode) ClearAlarm(t testing.TB) {
	t.Helper()
	n.Ctl(t, "set_vm_memory_high_watermark", defaultWatermark)
}

// Ctl runs rabbitmqctl with args against the node and returns its output,
// failing t when it fails or takes more than 2 minutes.
func (n *RabbitNode) Ctl(t testing.TB, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), nodeCtlTimeout)
	defer cancel()
	out, err := n.run(ctx, args...)
	if err != nil {
		t.Fatalf("testkit: rabbitmqctl %v on %s: %v", args, n.Name, err)
	}
	return out
}

func (n *RabbitNode) run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, n.ctl, append([]string{"-n", n.Name}, args...)...)
	cmd.Env, cmd.Dir = n.env, n.dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%w: %s", err, out)
	}
	return string(out), nil
}
