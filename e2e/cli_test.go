package e2e_test

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// commands lists each binary's subcommands with a variable each one reads (DESIGN's
// public contract).
var commands = map[string]map[string]string{
	"order": {"serve": "ORDER_WORKERS", "relay": "RELAY_BATCH_SIZE", "migrate": "ORDER_DATABASE_URL", "purge-outbox": "ORDER_DATABASE_URL",
		"replay-outbox": "OUTBOX_REPLAY_HORIZON", "purge-inbox": "INBOX_MIN_RETENTION", "dlq": "AMQP_URL"},
	"stock": {"serve": "STOCK_WORKERS", "migrate": "STOCK_DATABASE_URL", "purge-inbox": "INBOX_MIN_RETENTION", "dlq": "AMQP_URL",
		"relay": "RELAY_BATCH_SIZE", "purge-outbox": "STOCK_DATABASE_URL", "replay-outbox": "OUTBOX_REPLAY_HORIZON"},
	"shipping": {"serve": "SHIPPING_WORKERS", "migrate": "SHIPPING_DATABASE_URL", "purge-inbox": "INBOX_MIN_RETENTION", "dlq": "AMQP_URL"},
	"auditor":  {"serve": "AUDIT_INTERVAL"},
}

// runBinary runs bin/<name> with args and an empty environment, and returns its exit
// status, stdout and stderr.
func runBinary(t *testing.T, name string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), filepath.Join(os.Getenv(binDirEnv), name), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, stdout.String(), stderr.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), stdout.String(), stderr.String()
	}
	t.Fatalf("run %s %v: %v", name, args, err)
	return 0, "", ""
}

// TestEveryBinaryHasOneCommandLine: help, -h and --help, at the top and on each
// subcommand, exit 0 and print the usage on stdout, a subcommand's with the
// environment variables it reads; --version prints the build; a usage error exits 2
// with one line on stderr and nothing on stdout.
func TestEveryBinaryHasOneCommandLine(t *testing.T) {
	t.Parallel()
	for bin, subs := range commands {
		t.Run(bin, func(t *testing.T) {
			t.Parallel()
			for _, help := range [][]string{{"help"}, {"-h"}, {"--help"}} {
				code, out, errOut := runBinary(t, bin, help...)
				if code != 0 || !strings.Contains(out, "usage: "+bin+" <command>") || errOut != "" {
					t.Errorf("%s %v: exit %d, stdout %q, stderr %q", bin, help, code, out, errOut)
				}
				for sub := range subs {
					if !strings.Contains(out, "\n  "+sub+" ") {
						t.Errorf("%s %v does not list %s:\n%s", bin, help, sub, out)
					}
				}
			}
			for sub, variable := range subs {
				for _, args := range [][]string{{"help", sub}, {sub, "help"}, {sub, "-h"}, {sub, "--help"}} {
					code, out, errOut := runBinary(t, bin, args...)
					if code != 0 || !strings.HasPrefix(out, "usage: "+bin+" "+sub) || !strings.Contains(out, "environment (default):") ||
						!strings.Contains(out, variable) || !strings.Contains(out, "LOG_LEVEL") || errOut != "" {
						t.Errorf("%s %v: exit %d, stderr %q, stdout:\n%s", bin, args, code, errOut, out)
					}
				}
				if code, out, _ := runBinary(t, bin, sub, "--version"); code != 0 || !strings.HasPrefix(out, bin+" ") {
					t.Errorf("%s %s --version: exit %d, %q", bin, sub, code, out)
				}
			}
			if code, out, _ := runBinary(t, bin, "--version"); code != 0 || !strings.HasPrefix(out, bin+" ") || !strings.Contains(out, "go1.") {
				t.Errorf("%s --version: exit %d, %q", bin, code, out)
			}
			for _, args := range [][]string{{}, {"dance"}, {"serve", "extra"}, {"serve", "--loud"}} {
				code, out, errOut := runBinary(t, bin, args...)
				if code != 2 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, bin+": ") ||
					!strings.Contains(errOut, "(see "+bin+" help") {
					t.Errorf("%s %v: exit %d, stdout %q, stderr %q; want exit 2 and one line on stderr", bin, args, code, out, errOut)
				}
			}
		})
	}
	// A command's own usage error (a missing required flag) exits 2 as well.
	for bin, sub := range map[string]string{"order": "purge-outbox", "stock": "purge-inbox", "shipping": "purge-inbox"} {
		if code, _, errOut := runBinary(t, bin, sub); code != 2 || !strings.Contains(errOut, "--older-than") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s %s without --older-than: exit %d, stderr %q", bin, sub, code, errOut)
		}
	}
}
