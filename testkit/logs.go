package testkit

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"

	"example.com/shop/platform/logging"
)

// Logs collects what a logger or a command under test writes, one JSON object per
// line for the loggers of this project. It is an io.Writer safe for concurrent
// writers (every goroutine of a running service logs into it); the zero value is
// ready to use.
type Logs struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p; it never fails.
func (l *Logs) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

// String returns everything written so far.
func (l *Logs) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// Tail returns the last n bytes written so far, prefixed with "..." when older
// output was cut, for failure messages.
func (l *Logs) Tail(n int) string {
	s := l.String()
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Logger returns a logger at debug level, of the shape every process logs
// (logging.NewHandler), that writes into the returned Logs,
// so a test can read what the code under test logged. When t has failed by the
// time it ends, the last 8 KiB of the logs are written to the test output.
func Logger(t testing.TB) (*slog.Logger, *Logs) {
	t.Helper()
	logs := &Logs{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs.Tail(8<<10))
		}
	})
	return slog.New(logging.NewHandler(logs, slog.LevelDebug)), logs
}
