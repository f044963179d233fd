package system

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"

	"example.com/shop/contracts"
)

// Binaries lists the package of each binary the system runs, by the name of
// the file `go build` writes: one per service of the registry
// (contracts.Services), and the auditor.
func Binaries() map[string]string {
	bins := map[string]string{"auditor": "example.com/shop/services/auditor/cmd/auditor"}
	for _, s := range contracts.Services() {
		bins[s.Name] = "example.com/shop/services/" + s.Name + "/cmd/" + s.Name
	}
	return bins
}

// Build compiles the Binaries into dir with one `go build` run from
// the working directory (which must be inside the go.work workspace). With
// race set they are built with the race detector, so a data race in a
// service makes it print a report and exit 66. It returns the compiler's
// output in the error when the build fails.
func Build(ctx context.Context, dir string, race bool) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("build: %w", err)
	}
	args := []string{"build", "-o", dir + string(os.PathSeparator)}
	if race {
		args = append(args, "-race")
	}
	for _, name := range slices.Sorted(maps.Keys(Binaries())) {
		args = append(args, Binaries()[name])
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}
