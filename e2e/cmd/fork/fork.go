package main

import (
	"bytes"
	"fmt"
	"go/format"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"

	"example.com/shop/contracts"
	"example.com/shop/e2e/internal/project"
)

// Options is one fork: the repository Source is copied to Dir, its module path
// prefix becoming Module and its project name becoming Name, without the options
// (modules under integrations/, docs/adr/0011) named in Without.
type Options struct {
	Source, Dir, Module, Name string
	Without                   []string
}

// Change is one file of the fork that differs from its source: its path in the
// fork, its path in the source when the file was renamed, and how many module
// paths and project names it rewrote.
type Change struct {
	Path, From    string
	Module, Names int
}

// Report is what a fork did: the old and new module path and name, every
// changed file, and how many files it copied unchanged.
type Report struct {
	OldModule, Module, OldName, Name string
	Without                          []string // the options left out
	Changes                          []Change
	Copied                           int
}

// nameRE is what a project name may be: a lowercase letter, then lowercase
// letters and digits, 40 at most (with "_owner", a PostgreSQL role name). It is
// then a Go identifier, a DNS label (the Kubernetes namespace), a docker image
// and compose project name, and a vhost.
var nameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,39}$`)

// Fork copies o.Source to o.Dir with the module path and project name rewritten
// (see the package comment). It refuses, before writing anything, a module path
// that module.CheckPath rejects, a name that is not a plain lowercase word of at
// most 40 characters or that the repository uses as a Go identifier or in a
// file's path (the next fork would rename that use with the project), and a Dir
// that exists and is not empty or is inside the repository (symbolic links
// followed). A failure while copying removes what it wrote, so Dir is as before.
func Fork(o Options) (Report, error) {
	if o.Module == "" {
		return Report{}, usagef("MODULE is required, e.g. make fork MODULE=github.com/acme/orders")
	}
	if err := module.CheckPath(o.Module); err != nil {
		return Report{}, usagef("MODULE %q is not a module path: %v", o.Module, err)
	}
	if !nameRE.MatchString(o.Name) {
		return Report{}, usagef("NAME %q: a project name is a lowercase letter, then lowercase letters and digits, 40 at most (it names an image, a namespace and a vhost)", o.Name)
	}
	if token.IsKeyword(o.Name) || types.Universe.Lookup(o.Name) != nil {
		return Report{}, usagef("NAME %q is a Go keyword or predeclared identifier; choose another", o.Name)
	}
	src, err := resolve(o.Source)
	if err != nil {
		return Report{}, err
	}
	dst, err := resolve(o.Dir)
	if err != nil {
		return Report{}, err
	}
	if dst == src || strings.HasPrefix(dst, src+string(filepath.Separator)) {
		return Report{}, usagef("DIR %s is inside the repository it copies; choose a folder outside %s", o.Dir, src)
	}
	entries, err := os.ReadDir(dst)
	if err == nil && len(entries) > 0 {
		return Report{}, usagef("DIR %s exists and is not empty; choose a new folder or empty it", o.Dir)
	} else if err != nil && !os.IsNotExist(err) {
		return Report{}, err
	}
	existed := err == nil
	oldModule, err := project.Module(src)
	if err != nil {
		return Report{}, err
	}
	if o.Module == oldModule {
		return Report{}, usagef("MODULE %s is the module path of the repository already", o.Module)
	}
	oldName, err := project.Name(src)
	if err != nil {
		return Report{}, err
	}
	o.Without = slices.Compact(slices.Sorted(slices.Values(o.Without)))
	rep := Report{OldModule: oldModule, Module: o.Module, OldName: oldName, Name: o.Name, Without: o.Without}
	files, err := trackedFiles(src)
	if err != nil {
		return Report{}, err
	}
	if files, err = leaveOut(src, files, o.Without); err != nil {
		return Report{}, err
	}
	r := rewriter{oldModule: oldModule, module: o.Module, oldName: rep.OldName, name: o.Name}
	if r.oldName != r.name {
		// The next fork (the fork's own tests make one) renames every use of the
		// name: one the code has already would go with it (package main,
		// *_test.go, net/http).
		uses, err := nameUses(src, files, r.name)
		if err != nil {
			return Report{}, err
		}
		if len(uses) > 0 {
			return Report{}, usagef("NAME %q is a Go identifier or a word of a file's path in the repository already (%s), which a later fork would rename with the project; choose another", o.Name, joinLimit(uses, 3))
		}
	}
	if err := r.copyFiles(src, dst, files, o.Without, &rep); err != nil {
		if existed { // empty before: empty it again
			entries, _ := os.ReadDir(dst)
			for _, e := range entries {
				_ = os.RemoveAll(filepath.Join(dst, e.Name()))
			}
		} else {
			_ = os.RemoveAll(dst)
		}
		return Report{}, err
	}
	return rep, nil
}

// copyFiles writes files of src to dst rewritten, counting each in rep.
func (r rewriter) copyFiles(src, dst string, files, without []string, rep *Report) error {
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(src, f))
		if os.IsNotExist(err) {
			continue // deleted in the working tree, not yet committed
		}
		if err != nil {
			return err
		}
		info, err := os.Stat(filepath.Join(src, f))
		if err != nil {
			return err
		}
		if f == "go.work" || f == "deploy/Dockerfile" {
			b = dropLines(b, without)
		}
		to, names := r.path(f)
		out, c, err := r.content(f, b)
		if err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		c.Path, c.Names = to, c.Names+names
		if to != f {
			c.From = f
		}
		if err := os.MkdirAll(filepath.Join(dst, filepath.Dir(to)), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dst, to), out, info.Mode().Perm()); err != nil {
			return err
		}
		if c.Module+c.Names > 0 {
			rep.Changes = append(rep.Changes, c)
		} else {
			rep.Copied++
		}
	}
	return nil
}

// leaveOut returns files without those of the options named in without, each a
// folder integrations/<name> of root with a go.mod; it refuses any other name.
func leaveOut(root string, files, without []string) ([]string, error) {
	for _, name := range without {
		if !nameRE.MatchString(name) {
			return nil, usagef("WITHOUT %q: an option is a folder name of integrations/", name)
		}
		if _, err := os.Stat(filepath.Join(root, "integrations", name, "go.mod")); err != nil {
			opts, _ := filepath.Glob(filepath.Join(root, "integrations", "*", "go.mod"))
			var names []string
			for _, o := range opts {
				names = append(names, filepath.Base(filepath.Dir(o)))
			}
			return nil, usagef("WITHOUT %s: no option of that name; the options are %s", name, strings.Join(names, ", "))
		}
	}
	return slices.DeleteFunc(files, func(f string) bool {
		return slices.ContainsFunc(without, func(name string) bool { return strings.HasPrefix(f, "integrations/"+name+"/") })
	}), nil
}

// dropLines returns b without its lines that name the folder integrations/<name>
// of an option in without: go.work's `use` and the Dockerfile's COPY of its go.mod.
func dropLines(b []byte, without []string) []byte {
	lines := bytes.SplitAfter(b, []byte("\n"))
	return bytes.Join(slices.DeleteFunc(lines, func(l []byte) bool {
		return slices.ContainsFunc(without, func(name string) bool {
			return bytes.Contains(l, []byte("integrations/"+name+"/")) || bytes.HasSuffix(bytes.TrimSpace(l), []byte("integrations/"+name))
		})
	}), nil)
}

// resolve returns p absolute, with the symbolic links of its longest existing
// ancestor followed, so that a folder reached through a link is compared with
// the repository where it really is.
func resolve(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		if !os.IsNotExist(err) {
			return "", err
		}
		parent := filepath.Dir(p)
		if parent == p {
			return filepath.Join(p, rest), nil
		}
		rest, p = filepath.Join(filepath.Base(p), rest), parent
	}
}

// trackedFiles lists the files git tracks at root, slash-separated.
func trackedFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "-C", root, "ls-files", "-z")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files in %s: %v: %s", root, err, strings.TrimSpace(stderr.String()))
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		if f != "" {
			files = append(files, f)
		}
	}
	return files, nil
}

// modulePlaceholder holds the place of the new module path in a file while
// its project name is renamed: no letter or digit in it, and no text file has
// a NUL byte.
const modulePlaceholder = "\x00\x00"

// rewriter rewrites the module path prefix and the project name.
type rewriter struct {
	oldModule, module, oldName, name string
}

// path renames every element of f that is the project name as a word
// (deploy/grafana/shop.json), returning the new path and the count.
func (r rewriter) path(f string) (string, int) {
	if r.oldName == r.name {
		return f, 0
	}
	out, n := replaceWord([]byte(f), r.oldName, r.name)
	return string(out), n
}

// content rewrites one text file; a go.mod must parse afterwards and name the
// old module path nowhere, a Go file is formatted again. A file with a NUL byte
// is binary and copied as it is.
func (r rewriter) content(f string, b []byte) ([]byte, Change, error) {
	var c Change
	if bytes.IndexByte(b, 0) >= 0 {
		return b, c, nil
	}
	// The new module path stands in as a placeholder while the name is
	// renamed, which would otherwise rename it inside the new path too
	// (github.com/acme/books forked from a fork named acme).
	b, c.Module = replaceModule(b, r.oldModule, modulePlaceholder)
	if r.oldName != r.name {
		b, c.Names = replaceWord(b, r.oldName, r.name)
	}
	b = bytes.ReplaceAll(b, []byte(modulePlaceholder), []byte(r.module))
	if path.Base(f) == "go.mod" {
		if err := r.checkGoMod(f, b); err != nil {
			return nil, c, err
		}
	}
	if path.Ext(f) == ".go" && c.Module > 0 {
		// A new module path may sort elsewhere among the imports of a group
		// (github.com/zeta after github.com/go-chi): gofmt orders them again.
		out, err := format.Source(b)
		if err != nil {
			return nil, c, fmt.Errorf("gofmt after the rewrite: %w", err)
		}
		b = out
	}
	return b, c, nil
}

// checkGoMod parses a rewritten go.mod and fails when its module, a require
// or a replace still names the old module path.
func (r rewriter) checkGoMod(name string, b []byte) error {
	mf, err := modfile.Parse(name, b, nil)
	if err != nil {
		return err
	}
	paths := []string{mf.Module.Mod.Path}
	for _, req := range mf.Require {
		paths = append(paths, req.Mod.Path)
	}
	for _, rep := range mf.Replace {
		paths = append(paths, rep.Old.Path, rep.New.Path)
	}
	for _, p := range paths {
		if under(p, r.module) {
			continue // example.com/shop/v2 forked from example.com/shop
		}
		if under(p, r.oldModule) {
			return fmt.Errorf("still names %s after the rewrite", p)
		}
	}
	return nil
}

// under reports whether module path p is m or a path inside it.
func under(p, m string) bool {
	return p == m || strings.HasPrefix(p, m+"/")
}

// replaceModule replaces old with new where old is a module path of its own:
// not preceded by a letter, digit or one of "._-" (registry.example.com/shop is
// an image, not a module path) and not followed by one of those.
func replaceModule(b []byte, old, new string) ([]byte, int) {
	return replaceBounded(b, old, new, func(c byte) bool { return isAlnum(c) || c == '.' || c == '_' || c == '-' })
}

// replaceWord replaces the project name where it is a word of its own, not
// part of a longer word of letters and digits ("shop-demo", "SHOP_IMAGE",
// "shop.json" are the name; "Shopify", "newShop", "shopt" are not), in three
// spellings: lower case, Title case and UPPER case.
func replaceWord(b []byte, old, new string) ([]byte, int) {
	total := 0
	for _, sp := range spellings(old, new) {
		var n int
		b, n = replaceBounded(b, sp[0], sp[1], isAlnum)
		total += n
	}
	return b, total
}

// nameUses lists the files among files (under root) whose path has name as a
// word, or, for Go files, an identifier spelled as name, in one of the
// spellings replaceWord knows.
func nameUses(root string, files []string, name string) ([]string, error) {
	var uses []string
	for _, f := range files {
		if _, n := replaceWord([]byte(f), name, name); n > 0 {
			uses = append(uses, f)
			continue
		}
		if path.Ext(f) != ".go" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(root, f))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		var s scanner.Scanner
		fset := token.NewFileSet()
		s.Init(fset.AddFile(f, -1, len(b)), b, nil, 0)
		for {
			_, tok, lit := s.Scan()
			if tok == token.EOF {
				break
			}
			if tok == token.IDENT && slices.ContainsFunc(spellings(name, name), func(sp [2]string) bool { return sp[0] == lit }) {
				uses = append(uses, f)
				break
			}
		}
	}
	return uses, nil
}

func spellings(old, new string) [][2]string {
	title := func(s string) string { return strings.ToUpper(s[:1]) + s[1:] }
	return [][2]string{{old, new}, {title(old), title(new)}, {strings.ToUpper(old), strings.ToUpper(new)}}
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// replaceBounded replaces every old in b whose neighbours are not inWord.
func replaceBounded(b []byte, old, new string, inWord func(byte) bool) ([]byte, int) {
	var out bytes.Buffer
	n, i := 0, 0
	for {
		j := bytes.Index(b[i:], []byte(old))
		if j < 0 {
			break
		}
		j += i
		end := j + len(old)
		if (j == 0 || !inWord(b[j-1])) && (end == len(b) || !inWord(b[end])) {
			out.Write(b[i:j])
			out.WriteString(new)
			n++
		} else {
			out.Write(b[i:end])
		}
		i = end
	}
	if n == 0 {
		return b, 0
	}
	out.Write(b[i:])
	return out.Bytes(), n
}

// Print writes the report: every changed file with its counts, the totals,
// and what the fork left alone on purpose.
func (rep Report) Print(w io.Writer) {
	fmt.Fprintf(w, "module path %s -> %s, project name %s -> %s\n", rep.OldModule, rep.Module, rep.OldName, rep.Name)
	mods, names := 0, 0
	for _, c := range rep.Changes {
		from := ""
		if c.From != "" {
			from = " (was " + c.From + ")"
		}
		fmt.Fprintf(w, "  %-60s module path %3d, name %3d%s\n", c.Path, c.Module, c.Names, from)
		mods += c.Module
		names += c.Names
	}
	fmt.Fprintf(w, "changed %d files (%d module paths, %d names), copied %d unchanged\n", len(rep.Changes), mods, names, rep.Copied)
	for _, o := range rep.Without {
		fmt.Fprintf(w, "left out the option integrations/%s (and its lines in go.work and deploy/Dockerfile)\n", o)
	}
	var dbs, queues []string
	for _, s := range contracts.Services() {
		dbs = append(dbs, s.Database)
	}
	for _, c := range contracts.Consumers() {
		queues = append(queues, c.Queue, c.DeadLetterQueue)
	}
	fmt.Fprintf(w, "left alone on purpose (the domain's names: keep them or rename them with it):\n")
	fmt.Fprintf(w, "  databases %s (and the demo's demo_*), their roles <service>_app, _relay, _maintenance\n", strings.Join(dbs, ", "))
	fmt.Fprintf(w, "  events %s\n", strings.Join(contracts.EventNames(), ", "))
	fmt.Fprintf(w, "  exchange %s, queues %s, broker users\n", contracts.Exchange, strings.Join(queues, ", "))
	fmt.Fprintf(w, "  the example domain's hosts in URLs: example.com, registry.example.com\n")
}
