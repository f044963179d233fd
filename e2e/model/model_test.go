package model

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// check is one run of spin on model/journey.pml: its -D switches and whether
// spin must find an error.
type check struct {
	name    string
	defines []string
	refuted bool // a mutant: spin must find a counterexample
}

// Checks is what make model runs: the model under each fault budget, then
// every mutant (docs/model.md lists the numbers of a run).
var checks = []check{
	{name: "no-fault", defines: []string{"-DMAXF=0"}},
	{name: "two-consumer-crashes", defines: []string{"-DMAXF=2", "-DFAULTS=4"}},
	{name: "mark-before-confirm", defines: []string{"-DMUTANT_MARK_BEFORE_CONFIRM"}, refuted: true},
	{name: "ack-before-commit", defines: []string{"-DMUTANT_ACK_BEFORE_COMMIT"}, refuted: true},
	{name: "key-outside-tx", defines: []string{"-DMUTANT_KEY_OUTSIDE_TX"}, refuted: true},
	{name: "two-leaders", defines: []string{"-DMUTANT_TWO_LEADERS"}, refuted: true},
	{name: "no-version-guard", defines: []string{"-DMUTANT_NO_VERSION_GUARD"}, refuted: true},
}

// TestModel runs spin on the model and each mutant: the model must check with
// no error over its whole state space, and each mutant must fail, its
// counterexample trail saved in MODEL_TRAILS (see trail).
func TestModel(t *testing.T) {
	for _, tool := range []string{"spin", "gcc"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s is not installed: make tools (or make model) installs it, or apt-get install spin gcc", tool)
		}
	}
	src, err := os.ReadFile(filepath.Join(root(t), "model", "journey.pml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range checks {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "journey.pml"), src, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			run(ctx, t, dir, "spin", append(append([]string{"-a"}, c.defines...), "journey.pml")...)
			run(ctx, t, dir, "gcc", "-O2", "-w", "-DSAFETY", "-DCOLLAPSE", "-DMEMLIM=2048", "-o", "pan", "pan.c")
			out := run(ctx, t, dir, "./pan", "-m100000")
			s := parse(t, out)
			t.Logf("%s: errors %d, %s states, depth %s, %s MB, %s s", c.name, s.errors, s.states, s.depth, s.memory, s.seconds)
			switch {
			case !c.refuted && s.errors != 0:
				t.Errorf("the model fails:\n%s\n%s", out, trail(ctx, t, dir, c))
			case !c.refuted && strings.Contains(out, "Search not completed"):
				t.Errorf("the search did not complete:\n%s", out)
			case c.refuted && s.errors == 0:
				t.Errorf("mutant %s passes: spin found no counterexample\n%s", c.name, out)
			case c.refuted:
				trail(ctx, t, dir, c)
			}
		})
	}
}

// stats is what pan reports of a search.
type stats struct {
	errors                         int
	states, depth, memory, seconds string
}

var (
	errorsRe  = regexp.MustCompile(`errors: (\d+)`)
	statesRe  = regexp.MustCompile(`(\d+) states, stored`)
	depthRe   = regexp.MustCompile(`depth reached (\d+)`)
	memoryRe  = regexp.MustCompile(`([\d.]+)\s+total actual memory usage`)
	secondsRe = regexp.MustCompile(`pan: elapsed time ([\d.e+]+) seconds`)
)

// parse reads pan's summary; a summary without "errors: N" fails t.
func parse(t *testing.T, out string) stats {
	t.Helper()
	m := errorsRe.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("pan printed no \"errors: N\":\n%s", out)
	}
	var s stats
	fmt.Sscan(m[1], &s.errors)
	field := func(re *regexp.Regexp) string {
		if m := re.FindStringSubmatch(out); m != nil {
			return m[1]
		}
		return "?"
	}
	s.states, s.depth, s.memory, s.seconds = field(statesRe), field(depthRe), field(memoryRe), field(secondsRe)
	return s
}

// trail replays the counterexample pan wrote (spin -t -p), saves it as
// <check>.trail in MODEL_TRAILS (default: shop-model-trails in the system's
// temporary directory), where it outlives the test, logs its path and last
// lines, and returns it.
func trail(ctx context.Context, t *testing.T, dir string, c check) string {
	t.Helper()
	args := append(append([]string{"-t", "-p"}, c.defines...), "journey.pml")
	out := run(ctx, t, dir, "spin", args...)
	trails := os.Getenv("MODEL_TRAILS")
	if trails == "" {
		trails = filepath.Join(os.TempDir(), "shop-model-trails")
	}
	if err := os.MkdirAll(trails, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(trails, c.name+".trail")
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	t.Logf("counterexample of %s: %s (%d lines); it ends:\n%s", c.name, path, len(lines),
		strings.Join(lines[max(0, len(lines)-12):], "\n"))
	return out
}

// run runs name with args in dir and returns its combined output; a failure
// to run, or a non-zero exit, fails t.
func run(ctx context.Context, t *testing.T, dir, name string, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// root is the repository's root: the nearest parent holding model/journey.pml.
func root(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "model", "journey.pml")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no model/journey.pml above the test's directory")
		}
		dir = parent
	}
}

// codeRef is a reference to a function in docs/model.md: `path.go:Function`.
var codeRef = regexp.MustCompile("`([\\w./-]+\\.go):(\\w+)`")

// TestModelDocReferences checks that every `path.go:Function` of
// docs/model.md names a file of the repository that declares that function
// or method.
func TestModelDocReferences(t *testing.T) {
	base := root(t)
	f, err := os.Open(filepath.Join(base, "docs", "model.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	refs := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		for _, m := range codeRef.FindAllStringSubmatch(sc.Text(), -1) {
			refs++
			body, err := os.ReadFile(filepath.Join(base, m[1]))
			if err != nil {
				t.Errorf("docs/model.md names %s:%s: %v", m[1], m[2], err)
				continue
			}
			decl := regexp.MustCompile(`(?m)^func (\([^)]*\) )?` + m[2] + `[\[(]`)
			if !decl.Match(body) {
				t.Errorf("docs/model.md names %s:%s: %s declares no func %s", m[1], m[2], m[1], m[2])
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if refs < 10 {
		t.Errorf("docs/model.md names %d functions, want every process of the model mapped to its code", refs)
	}
}
