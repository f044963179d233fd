package dlq

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	amqp091 "github.com/rabbitmq/amqp091-go"

	"example.com/shop/platform/amqp"
	"example.com/shop/testkit"
)

// helperEnv names the variable that turns the test binary into `dlq` run with the
// Config it holds (JSON) and the process's arguments after "--".
const helperEnv = "DLQ_TEST_HELPER_CONFIG"

// helperConfig is a Config as the helper process receives it.
type helperConfig struct {
	Config
	Pause time.Duration
}

func TestMain(m *testing.M) {
	if raw := os.Getenv(helperEnv); raw != "" {
		var hc helperConfig
		if err := json.Unmarshal([]byte(raw), &hc); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		hc.Config.pause = hc.Pause
		args := os.Args[1:]
		for i, a := range args {
			if a == "--" {
				args = args[i+1:]
				break
			}
		}
		if err := Run(context.Background(), hc.Config, args, os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestReplayKilledMidwayLosesNothing kills `dlq replay --all` with SIGKILL after it
// has replayed a few of 40 messages: every message is then in the dead-letter queue,
// in the service's queue, or both; a second replay finishes the job and resolves
// every row.
func TestReplayKilledMidwayLosesNothing(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	const n = 40
	want := map[string]bool{}
	ch := rawChannel(t)
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	for range n {
		id, m := event(time.Now())
		want[id.String()] = true
		dl := amqp.DeadLetter{Delivery: amqp.Delivery{Body: m.Body, MessageID: m.MessageID, Type: m.Type},
			Reason: "boom", Attempts: 5, At: time.Now().UTC()}
		if err := Record(t.Context(), f.pool, "tester", dl); err != nil {
			t.Fatal(err)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(t.Context(), "", f.cfg.DeadLetterQueue, true, false, amqp091.Publishing{
			MessageId: m.MessageID, Type: m.Type, Body: m.Body, DeliveryMode: amqp091.Persistent,
			Headers: amqp091.Table{amqp.HeaderAttempt: int32(5), amqp.HeaderLastError: "boom"},
		})
		if err != nil || !dc.Wait() {
			t.Fatalf("fill the dead-letter queue: %v", err)
		}
	}

	cfg, err := json.Marshal(helperConfig{Config: f.cfg, Pause: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "--", "replay", "--all")
	cmd.Env = append(os.Environ(), helperEnv+"="+string(cfg))
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = t.Output()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(stdout)
	replayed := 0
	for replayed < 5 && lines.Scan() {
		if strings.HasPrefix(lines.Text(), "replayed") {
			replayed++
		}
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if replayed < 5 {
		t.Fatalf("the replay printed %d replayed lines before it ended, want 5", replayed)
	}

	inDLQ, inQueue := f.drainIDs(t, f.cfg.DeadLetterQueue, false), f.drainIDs(t, f.cfg.Queue, true)
	if len(inDLQ) == 0 || len(inQueue) == 0 || len(inQueue) == n {
		t.Fatalf("not killed midway: %d in the dead-letter queue, %d in the queue", len(inDLQ), len(inQueue))
	}
	for id := range want {
		if !inDLQ[id] && !inQueue[id] {
			t.Errorf("event %s lost", id)
		}
	}

	// Finish the job: every message ends in the queue, every row resolved.
	if out, err := f.run(t, "replay", "--all"); err != nil {
		t.Fatalf("second replay: %v\n%s", err, out)
	}
	for id := range f.drainIDs(t, f.cfg.Queue, true) {
		inQueue[id] = true
	}
	for id := range want {
		if !inQueue[id] {
			t.Errorf("event %s not replayed", id)
		}
	}
	if d := f.depth(t, f.cfg.DeadLetterQueue); d != 0 {
		t.Errorf("%d messages left in the dead-letter queue", d)
	}
	var open int
	if err := f.pool.QueryRow(t.Context(), `SELECT count(*) FROM dead_letter WHERE resolved_at IS NULL`).Scan(&open); err != nil || open != 0 {
		t.Errorf("%d rows open (%v), want 0", open, err)
	}
}

// drainIDs returns the event ids of the messages in queue; it takes them for good
// when take, else returns them to the queue.
func (f *fixture) drainIDs(t *testing.T, queue string, take bool) map[string]bool {
	t.Helper()
	ch := rawChannel(t)
	ids := map[string]bool{}
	for {
		d, ok, err := ch.Get(queue, take)
		if err != nil {
			t.Fatalf("get %s: %v", queue, err)
		}
		if !ok {
			break
		}
		if _, err := uuid.Parse(d.MessageId); err != nil {
			t.Fatalf("message %q in %s", d.MessageId, queue)
		}
		ids[d.MessageId] = true
	}
	if !take {
		_ = ch.Close() // the unacked messages go back
	}
	return ids
}

func rawChannel(t *testing.T) *amqp091.Channel {
	t.Helper()
	conn, err := amqp091.Dial(testkit.AMQPURL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	return ch
}
