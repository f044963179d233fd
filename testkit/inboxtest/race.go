package inboxtest

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"example.com/shop/platform/inbox"
)

// The race's shape: RaceProcesses processes of the test binary, RaceMessages
// messages, each delivered RaceCopies times, the copies of one message to
// different processes at the same moment.
const (
	RaceProcesses = 8
	RaceMessages  = 60
	RaceCopies    = 3
)

// RaceWorkerEnv is set in the environment of RunRace's processes; a TestMain that
// prepares databases of its own can skip that work when it is set.
const RaceWorkerEnv = "INBOXTEST_RACE_WORKER"

const (
	raceDSNEnv    = "INBOXTEST_RACE_DSN"
	raceRunEnv    = "INBOXTEST_RACE_RUN"
	raceResultTag = "inboxtest-race-result "
)

// raceResult is what one process reports.
type raceResult struct {
	Worker     int      `json:"worker"`
	Processed  int      `json:"processed"`
	Duplicates int      `json:"duplicates"`
	Errors     []string `json:"errors"`
}

// RunRace is the inbox's race with real processes on one store: RaceProcesses
// copies of the test binary each open their own connection to one database and,
// released together, handle their share of RaceMessages messages delivered
// RaceCopies times each, every copy of a message in another process, all in
// message order so that copies meet. Every message must be applied exactly once:
// one key and one effect per message, RaceMessages processed and
// RaceMessages*(RaceCopies-1) duplicates across the processes, no error. It logs
// the time from the release to the last report.
//
// Call it from a top-level test function (the processes re-run that test by
// name); in a process it plays the worker's part instead.
func RunRace[DB, Tx any](t *testing.T, st Store[DB, Tx]) {
	if w := os.Getenv(RaceWorkerEnv); w != "" {
		raceWorker(t, st, w)
		return
	}
	if strings.Contains(t.Name(), "/") {
		t.Fatal("RunRace must be called from a top-level test function")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	db, dsn := st.NewDatabase(t)
	if err := st.Exec(ctx, db, EffectTable); err != nil {
		t.Fatalf("create effect table: %v", err)
	}
	run := uuid.NewString()

	procs := make([]*raceProcess, RaceProcesses)
	for n := range procs {
		procs[n] = startRaceProcess(ctx, t, n, dsn, run)
	}
	// Each process says "ready" once connected; then all are released at once.
	for n, p := range procs {
		if !waitLine(p.lines, &p.out, "ready") {
			t.Fatalf("process %d never got ready:\n%s", n, p.out.String())
		}
	}
	start := time.Now()
	for _, p := range procs {
		_ = p.stdin.Close()
	}
	var results []raceResult
	var last time.Duration
	for n, p := range procs {
		results = append(results, p.result(t, n))
		last = max(last, time.Since(start))
	}

	processed, dups, busy := tally(t, results)
	if processed != RaceMessages || dups != RaceMessages*(RaceCopies-1) {
		t.Errorf("across the processes: %d processed, %d duplicates; want %d, %d", processed, dups, RaceMessages, RaceMessages*(RaceCopies-1))
	}
	count := func(q string) int {
		n, err := st.Count(ctx, db, q)
		if err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		return n
	}
	if k, e, d := count(`SELECT count(*) FROM processed_event WHERE consumer = 'race'`), count(`SELECT count(*) FROM inboxtest_effect`),
		count(`SELECT count(DISTINCT message_id) FROM inboxtest_effect`); k != RaceMessages || e != RaceMessages || d != RaceMessages {
		t.Errorf("keys = %d, effects = %d over %d messages; want %d each", k, e, d, RaceMessages)
	}
	t.Logf("%d processes, %d messages x %d copies: %d processed, %d duplicates, %d processes applied messages, %v from release to the last report",
		RaceProcesses, RaceMessages, RaceCopies, processed, dups, busy, last.Round(time.Millisecond))
}

// tally adds up the processes' results: messages processed, duplicates, and
// processes that processed any; t fails on every error a process reported.
func tally(t *testing.T, results []raceResult) (processed, dups, busy int) {
	for _, r := range results {
		processed += r.Processed
		dups += r.Duplicates
		if r.Processed > 0 {
			busy++
		}
		for _, e := range r.Errors {
			t.Errorf("process %d: %s", r.Worker, e)
		}
	}
	return processed, dups, busy
}

// raceProcess is one of RunRace's processes: its command, its stdin (closing it
// releases the process), the lines of its stdout and what they said so far.
type raceProcess struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines *bufio.Scanner
	out   strings.Builder
}

// startRaceProcess starts worker n of RunRace's test t, on dsn, for the run
// named run; t's cleanup closes its stdin and waits for it.
func startRaceProcess(ctx context.Context, t *testing.T, n int, dsn, run string) *raceProcess {
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^"+regexp.QuoteMeta(t.Name())+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), RaceWorkerEnv+"="+strconv.Itoa(n), raceDSNEnv+"="+dsn, raceRunEnv+"="+run)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start process %d: %v", n, err)
	}
	p := &raceProcess{cmd: cmd, stdin: stdin, lines: bufio.NewScanner(stdout)}
	t.Cleanup(func() {
		_ = p.stdin.Close()
		_ = p.cmd.Wait()
	})
	return p
}

// result reads process n's output to its end and returns the result it
// reported; t fails when it reported none or exited with an error.
func (p *raceProcess) result(t *testing.T, n int) raceResult {
	var r raceResult
	found := false
	for p.lines.Scan() {
		line := p.lines.Text()
		p.out.WriteString(line + "\n")
		if rest, ok := strings.CutPrefix(line, raceResultTag); ok {
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				t.Fatalf("process %d: %v", n, err)
			}
			found = true
		}
	}
	if err := p.cmd.Wait(); err != nil || !found {
		t.Fatalf("process %d: %v, result found %v:\n%s", n, err, found, p.out.String())
	}
	return r
}

// waitLine reads lines into out until one equals want.
func waitLine(lines *bufio.Scanner, out *strings.Builder, want string) bool {
	for lines.Scan() {
		out.WriteString(lines.Text() + "\n")
		if lines.Text() == want {
			return true
		}
	}
	return false
}

// raceWorker is one process of RunRace: its copies are those c of message m with
// (m*RaceCopies + c) % RaceProcesses == worker, handled in message order.
func raceWorker[DB, Tx any](t *testing.T, st Store[DB, Tx], w string) {
	worker, err := strconv.Atoi(w)
	if err != nil {
		t.Fatalf("%s: %v", RaceWorkerEnv, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, closeDB, err := st.Open(ctx, os.Getenv(raceDSNEnv))
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	defer closeDB()
	if _, err := st.Count(ctx, db, `SELECT count(*) FROM processed_event`); err != nil {
		t.Fatalf("warm up: %v", err)
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin) // released when the parent closes it

	run := os.Getenv(raceRunEnv)
	c := inbox.NewStoreConsumer(st.Store, inbox.Config{Name: "race"})
	r := raceResult{Worker: worker, Errors: []string{}}
	for m := range RaceMessages {
		for copy := range RaceCopies {
			if (m*RaceCopies+copy)%RaceProcesses != worker {
				continue
			}
			key := fmt.Sprintf("%s-%d", run, m)
			out, err := c.Handle(ctx, db, inbox.Message{Key: key, Content: []byte(key)}, func(ctx context.Context, tx Tx) (any, error) {
				return nil, st.ExecTx(ctx, tx, `INSERT INTO inboxtest_effect (message_id, worker) VALUES (?, ?)`, key, worker)
			})
			switch {
			case err != nil:
				r.Errors = append(r.Errors, err.Error())
			case out.Duplicate:
				r.Duplicates++
			default:
				r.Processed++
			}
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println(raceResultTag + string(b))
}
