package testkit

import (
	"os/exec"
	"testing"
)

// Chromium returns the path of a Chromium or Chrome on PATH for the browser tests of
// the live page. It fails t, never skips, when there is none (make test installs the
// Debian package chromium when it runs as root, and otherwise names the command).
func Chromium(t testing.TB) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found on PATH: install it (Debian: apt-get install -y chromium)")
	return ""
}
