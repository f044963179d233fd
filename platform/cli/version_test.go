package cli

import (
	"strings"
	"testing"
)

// TestVersionStamped: the version make build stamps comes first, then the Go version.
// Not parallel: it sets the package's link-time variable.
func TestVersionStamped(t *testing.T) {
	old := version
	defer func() { version = old }()
	version = "v1.2.3-4-gabcdef0-dirty"
	if got := Version(); !strings.HasPrefix(got, "v1.2.3-4-gabcdef0-dirty go1.") {
		t.Errorf("Version() = %q", got)
	}
	version = ""
	if got := Version(); !strings.Contains(got, "go1.") || strings.HasPrefix(got, " ") {
		t.Errorf("unstamped Version() = %q", got)
	}
}
