package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
)

// workGoVersion returns the go directive of root's go.work, which every module follows.
func workGoVersion(root string) (string, error) {
	name := filepath.Join(root, "go.work")
	b, err := os.ReadFile(name)
	if err != nil {
		return "", err
	}
	wf, err := modfile.ParseWork(name, b, nil)
	if err != nil {
		return "", err
	}
	if wf.Go == nil {
		return "", fmt.Errorf("go.work has no go directive")
	}
	return wf.Go.Version, nil
}

// goSum is the union of the go.sum files of contracts, platform and testkit, the modules a
// service requires: every checksum the new module's dependencies need, before `go mod tidy` drops
// those it does not.
func goSum(root string) ([]byte, error) {
	var lines []string
	for _, m := range []string{"contracts", "platform", "testkit"} {
		f, err := os.Open(filepath.Join(root, m, "go.sum"))
		if err != nil {
			return nil, err
		}
		s := bufio.NewScanner(f)
		for s.Scan() {
			if l := strings.TrimSpace(s.Text()); l != "" {
				lines = append(lines, l)
			}
		}
		f.Close()
		if err := s.Err(); err != nil {
			return nil, err
		}
	}
	slices.Sort(lines)
	return []byte(strings.Join(slices.Compact(lines), "\n") + "\n"), nil
}

// goCommand runs go with args in dir and returns its output; an error holds the output.
func goCommand(dir string, args ...string) (string, error) {
	return command(dir, "go", args...)
}

func command(dir, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s in %s: %v\n%s", name, strings.Join(args, " "), dir, err, out)
	}
	return string(out), nil
}

// goGenerated are the files `go generate ./contracts` writes, which it does not print.
var goGenerated = []string{"contracts/events.go", "contracts/schemas/event-names.json"}

// readGoGenerated returns the files of goGenerated at root, by name.
func readGoGenerated(root string) map[string][]byte {
	files := map[string][]byte{}
	for _, rel := range goGenerated {
		files[rel], _ = os.ReadFile(filepath.Join(root, filepath.FromSlash(rel)))
	}
	return files
}

// generate runs `make generate` at root and returns the files it wrote or removed: those
// the generator prints ("generate: <path>") and those of goGenerated that differ from
// before.
func generate(root string, before map[string][]byte) ([]string, error) {
	out, err := command(root, "make", "--no-print-directory", "generate")
	if err != nil {
		return nil, err
	}
	var files []string
	for _, rel := range goGenerated {
		if after, _ := os.ReadFile(filepath.Join(root, filepath.FromSlash(rel))); !bytes.Equal(after, before[rel]) {
			files = append(files, rel)
		}
	}
	for line := range strings.Lines(out) {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "generate: "); ok {
			files = append(files, f)
		}
	}
	return files, nil
}
