// Package system starts the real binaries of the shop (order API, relay,
// stock, shipping) as child processes on given databases and broker, and
// controls them: wait until ready, stop gracefully, kill hard, restart. The
// end-to-end suite and the demo both drive the system through it.
package system

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"
)

// Process is one running binary with its subcommand and environment. Its
// output is kept in memory (the last 1 MiB) and copied to Log when set.
type Process struct {
	Name string   // label used in errors and logs, e.g. "relay"
	Bin  string   // path of the binary
	Args []string // subcommand and flags, e.g. ["serve"]
	Env  []string // KEY=VALUE pairs added to the parent's environment
	Addr string   // host:port of its HTTP server (for /readyz)
	Log  io.Writer

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	output tailBuffer
}

// Start launches the process. It returns an error when it is already running
// or cannot be started.
func (p *Process) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s: already running", p.Name)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = p.cmdEnv()
	var out io.Writer = &p.output
	if p.Log != nil {
		out = io.MultiWriter(&p.output, prefixWriter{p.Log, p.Name})
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: start: %w", p.Name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	p.cmd, p.done = cmd, done
	return nil
}

func (p *Process) cmdEnv() []string {
	return append(os.Environ(), p.Env...)
}

// WaitReady polls GET /readyz until it answers 200, the process exits, or
// ctx ends.
func (p *Process) WaitReady(ctx context.Context) error {
	url := "http://" + p.Addr + "/readyz"
	client := &http.Client{Timeout: time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		p.mu.Lock()
		done := p.done
		p.mu.Unlock()
		select {
		case <-done:
			return fmt.Errorf("%s exited before it was ready; output:\n%s", p.Name, p.Output())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready: %w; output:\n%s", p.Name, ctx.Err(), p.Output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop sends SIGTERM and waits up to grace for a clean exit, then SIGKILL.
// Stopping a process that is not running is a no-op.
func (p *Process) Stop(grace time.Duration) error {
	return p.signal(syscall.SIGTERM, grace)
}

// Kill sends SIGKILL, as a crash would, and waits for the exit.
func (p *Process) Kill() error {
	return p.signal(syscall.SIGKILL, 0)
}

func (p *Process) signal(sig syscall.Signal, grace time.Duration) error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd, p.done = nil, nil
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: signal: %w", p.Name, err)
	}
	if sig != syscall.SIGKILL {
		select {
		case <-done:
			return nil
		case <-time.After(grace):
			_ = cmd.Process.Kill()
		}
	}
	<-done
	return nil
}

// Signal sends sig (for example SIGSTOP or SIGCONT) to the process without
// waiting for anything; it is a no-op when the process is not running.
func (p *Process) Signal(sig syscall.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("%s: signal %v: %w", p.Name, sig, err)
	}
	return nil
}

// Running reports whether the process has been started and not yet exited.
func (p *Process) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done == nil {
		return false
	}
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// PID returns the process id, or 0 when it was never started.
func (p *Process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Output returns the last 1 MiB the process wrote to stdout and stderr.
func (p *Process) Output() string { return p.output.String() }

// tailBuffer keeps the last 1 MiB written to it; safe for concurrent use.
type tailBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

const tailLimit = 1 << 20

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Write(p)
	if over := b.buf.Len() - tailLimit; over > 0 {
		b.buf.Next(over)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type prefixWriter struct {
	w    io.Writer
	name string
}

func (pw prefixWriter) Write(p []byte) (int, error) {
	for _, line := range bytes.SplitAfter(p, []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		if _, err := fmt.Fprintf(pw.w, "%-8s| %s", pw.name, line); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}
