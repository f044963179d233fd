package system

import (
	"context"
	"fmt"
	"os"
	"os/exec"
)

// Binaries lists the package of each binary the system runs, by the name of
// the file `go build` writes.
func Binaries() map[string]string {
	return map[string]string{
		"order":    "example.com/shop/services/order/cmd/order",
		"stock":    "example.com/shop/services/stock/cmd/stock",
		"shipping": "example.com/shop/services/shipping/cmd/shipping",
		"auditor":  "example.com/shop/services/auditor/cmd/auditor",
	}
}

// Build compiles the four binaries into dir with one `go build` run from
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
	for _, pkg := range []string{"order", "stock", "shipping", "auditor"} {
		args = append(args, Binaries()[pkg])
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go %v: %w\n%s", args, err, out)
	}
	return nil
}
