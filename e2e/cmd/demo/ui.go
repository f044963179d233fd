package main

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// ui prints the demo's steps to a terminal or a log: numbered step titles,
// indented details, and a final table. Safe for concurrent use.
type ui struct {
	mu    sync.Mutex
	w     io.Writer
	n     int
	total int
	start time.Time
	since time.Time
}

func newUI(w io.Writer, steps int) *ui {
	now := time.Now()
	return &ui{w: w, total: steps, start: now, since: now}
}

// step starts the next numbered step.
func (u *ui) step(title string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.n++
	u.since = time.Now()
	fmt.Fprintf(u.w, "\n[%2d/%d] %s\n", u.n, u.total, title)
}

// say prints one detail line of the current step, with the time since the
// step began.
func (u *ui) say(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.w, "  %6s  %s\n", fmtDur(time.Since(u.since)), fmt.Sprintf(format, args...))
}

// plain prints a line as it is.
func (u *ui) plain(format string, args ...any) {
	u.mu.Lock()
	defer u.mu.Unlock()
	fmt.Fprintf(u.w, format+"\n", args...)
}

func fmtDur(d time.Duration) string {
	switch {
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	default:
		return fmt.Sprintf("%.1fs", d.Seconds())
	}
}

// row is one line of the summary table.
type row struct {
	name, value, note string
}

// table prints rows with aligned columns.
func (u *ui) table(rows []row) {
	u.mu.Lock()
	defer u.mu.Unlock()
	wn, wv := 0, 0
	for _, r := range rows {
		wn = max(wn, len(r.name))
		wv = max(wv, len(r.value))
	}
	line := "  +" + strings.Repeat("-", wn+2) + "+" + strings.Repeat("-", wv+2) + "+"
	fmt.Fprintln(u.w, line)
	for _, r := range rows {
		fmt.Fprintln(u.w, strings.TrimRight(fmt.Sprintf("  | %-*s | %*s |  %s", wn, r.name, wv, r.value, r.note), " "))
	}
	fmt.Fprintln(u.w, line)
}
