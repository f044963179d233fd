package e2e_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	pathpkg "path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// tourRules is how many numbered rules docs/architecture.md has; the tour
// walks each of them.
const tourRules = 8

// tourMaxHops is the most hops a path of the tour takes from its entry.
const tourMaxHops = 4

// tourScreen is how many lines a function's first screen has: each rule's SQL
// must start there, in the function or in a constant it names.
const tourScreen = 40

// TestTour checks docs/tour.md against the code, so the tour cannot rot: every
// `path.go:Name` it names is a Go file that defines Name (a function, a method
// as Type.Method, a type, a constant or a variable), every path of a rule takes
// at most tourMaxHops hops from its entry, and every SQL block is found, its
// whitespace normalised ("..." standing for any text), on the first screen of
// the function named before it, or in a constant or variable that function
// names. With -v it prints where each rule's SQL sits in its function.
func TestTour(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	tour, err := os.ReadFile(filepath.Join(root, "docs", "tour.md"))
	if err != nil {
		t.Fatal(err)
	}
	rules, problems := checkTour(root, string(tour))
	for _, p := range problems {
		t.Error(p)
	}
	for n := 1; n <= tourRules; n++ {
		r, ok := rules[n]
		if !ok {
			t.Errorf("docs/tour.md has no section for rule %d", n)
			continue
		}
		for _, s := range r.sql {
			t.Logf("rule %d: hops %d; SQL at %s", n, r.hops, s)
		}
		if len(r.sql) == 0 {
			t.Logf("rule %d: hops %d; no SQL", n, r.hops)
		}
	}
	for _, must := range []string{"README.md", "docs/architecture.md"} {
		b, err := os.ReadFile(filepath.Join(root, must))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "tour.md") {
			t.Errorf("%s does not link the tour (docs/tour.md)", must)
		}
	}
}

// TestTourCatchesRot feeds checkTour tours that are wrong in each way the
// tour can rot, and expects a problem for each.
func TestTourCatchesRot(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	for name, tc := range map[string]struct{ tour, want string }{
		"missing file":            {"## Rule 1. x\n\n1. `platform/outbox/nowhere.go:Writer.Insert` x\n", "nowhere.go"},
		"missing identifier":      {"## Rule 1. x\n\n1. `platform/outbox/writer.go:Writer.Upsert` x\n", "Writer.Upsert"},
		"method on another type":  {"## Rule 1. x\n\n1. `platform/outbox/writer.go:Relay.Insert` x\n", "Relay.Insert"},
		"SQL not in the function": {"## Rule 1. x\n\n1. `platform/outbox/writer.go:Writer.Insert` x\n\n```sql\nDELETE FROM outbox\n```\n", "DELETE FROM outbox"},
		"SQL with no function":    {"## Rule 1. x\n\n```sql\nSELECT 1\n```\n", "SELECT 1"},
		"too many hops": {"## Rule 1. x\n\n1. `platform/outbox/writer.go:Writer.Insert` a\n2. `platform/outbox/writer.go:Writer.Insert` b\n" +
			"3. `platform/outbox/writer.go:Writer.Insert` c\n4. `platform/outbox/writer.go:Writer.Insert` d\n" +
			"5. `platform/outbox/writer.go:Writer.Insert` e\n6. `platform/outbox/writer.go:Writer.Insert` f\n", "hops"},
	} {
		_, problems := checkTour(root, tc.tour)
		found := false
		for _, p := range problems {
			found = found || strings.Contains(p, tc.want)
		}
		if !found {
			t.Errorf("%s: problems %q, want one naming %q", name, problems, tc.want)
		}
	}
}

// tourRule is what the tour says about one rule, as checked.
type tourRule struct {
	hops int      // the longest path's
	sql  []string // where each SQL block was found
}

var (
	tourHeading = regexp.MustCompile(`^## Rule (\d+)\.`)
	tourStep    = regexp.MustCompile("^(\\d+)\\. `([\\w./-]+\\.go):([\\w.]+)`")
	tourRef     = regexp.MustCompile("`([\\w./-]+\\.go):([\\w.]+)`")
)

// checkTour reads a tour: "## Rule N." sections, in each one or more numbered
// lists of steps (a list starting at 1 is a path from an entry, each later
// step a hop), each step starting with `path:Name`, and ```sql blocks that
// belong to the step before them. It returns the rules it read and every
// problem found.
func checkTour(root, tour string) (map[int]*tourRule, []string) {
	rules := map[int]*tourRule{}
	var problems []string
	files := map[string]*goFile{}
	var (
		rule     *tourRule
		ruleN    int
		pathLen  int
		last     *goDecl // the step SQL belongs to
		inSQL    bool
		sql      []string
		sqlStart int
	)
	sc := bufio.NewScanner(strings.NewReader(tour))
	for line := 1; sc.Scan(); line++ {
		text := sc.Text()
		fence := strings.TrimSpace(text)
		where := fmt.Sprintf("docs/tour.md:%d", line)
		switch {
		case inSQL && strings.HasPrefix(fence, "```"):
			inSQL = false
			q := strings.Join(sql, "\n")
			if last == nil {
				problems = append(problems, fmt.Sprintf("%s: SQL %q follows no step naming a function", fmt.Sprintf("docs/tour.md:%d", sqlStart), firstLine(q)))
				continue
			}
			at, err := last.findSQL(files, q)
			if err != nil {
				problems = append(problems, fmt.Sprintf("docs/tour.md:%d: %v", sqlStart, err))
				continue
			}
			if rule != nil {
				rule.sql = append(rule.sql, at)
			}
			continue
		case inSQL:
			sql = append(sql, text)
			continue
		case strings.HasPrefix(fence, "```sql"):
			inSQL, sql, sqlStart = true, nil, line
			continue
		}
		if m := tourHeading.FindStringSubmatch(text); m != nil {
			ruleN, _ = strconv.Atoi(m[1])
			rule = &tourRule{}
			rules[ruleN] = rule
			last, pathLen = nil, 0
			continue
		}
		for _, m := range tourRef.FindAllStringSubmatch(text, -1) {
			if _, err := resolve(root, files, m[1], m[2]); err != nil {
				problems = append(problems, fmt.Sprintf("%s: %v", where, err))
			}
		}
		m := tourStep.FindStringSubmatch(text)
		if m == nil {
			continue
		}
		if n, _ := strconv.Atoi(m[1]); n == 1 {
			pathLen = 0
		}
		pathLen++
		if rule != nil {
			if hops := pathLen - 1; hops > rule.hops {
				rule.hops = hops
			}
			if pathLen-1 > tourMaxHops {
				problems = append(problems, fmt.Sprintf("%s: rule %d: a path of %d hops, more than %d", where, ruleN, pathLen-1, tourMaxHops))
			}
		}
		last, _ = resolve(root, files, m[2], m[3])
	}
	return rules, problems
}

func firstLine(s string) string {
	first, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return first
}

// goFile is one parsed Go file of the tour, with its source.
type goFile struct {
	root string // the repository
	path string // relative to the repository, with slashes
	dir  string // absolute, for the package's other files
	fset *token.FileSet
	file *ast.File
	src  []byte
}

// goDecl is a declaration the tour names.
type goDecl struct {
	f    *goFile
	name string
	node ast.Node
}

// resolve returns the declaration of name in the Go file path: Type.Method for
// a method, else a function, type, constant or variable of the file.
func resolve(root string, files map[string]*goFile, path, name string) (*goDecl, error) {
	f, err := parseGo(root, files, path)
	if err != nil {
		return nil, err
	}
	recv, fn, isMethod := strings.Cut(name, ".")
	if !isMethod {
		fn = recv
	}
	for _, d := range f.file.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Name.Name != fn {
				continue
			}
			if isMethod == (d.Recv != nil) && (!isMethod || receiverName(d.Recv) == recv) {
				return &goDecl{f: f, name: name, node: d}, nil
			}
		case *ast.GenDecl:
			if isMethod {
				continue
			}
			for _, s := range d.Specs {
				switch s := s.(type) {
				case *ast.TypeSpec:
					if s.Name.Name == fn {
						return &goDecl{f: f, name: name, node: d}, nil
					}
				case *ast.ValueSpec:
					for _, id := range s.Names {
						if id.Name == fn {
							return &goDecl{f: f, name: name, node: d}, nil
						}
					}
				}
			}
		}
	}
	return nil, fmt.Errorf("%s defines no %s", path, name)
}

// receiverName is the type name of a method's receiver, without * or type parameters.
func receiverName(recv *ast.FieldList) string {
	t := recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func parseGo(root string, files map[string]*goFile, path string) (*goFile, error) {
	if f, ok := files[path]; ok {
		return f, nil
	}
	abs := filepath.Join(root, filepath.FromSlash(path))
	src, err := os.ReadFile(abs)
	if err != nil {
		return nil, fmt.Errorf("%s: no such file", path)
	}
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, abs, src, parser.ParseComments)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	f := &goFile{root: root, path: path, dir: filepath.Dir(abs), fset: fset, file: file, src: src}
	files[path] = f
	return f, nil
}

// findSQL finds the SQL q on the first screen of d (tourScreen lines from its
// func line, its doc comment not counted), or in a package-level constant or
// variable of d's package that the first screen names, and says where.
func (d *goDecl) findSQL(files map[string]*goFile, q string) (string, error) {
	fn, ok := d.node.(*ast.FuncDecl)
	if !ok {
		return "", fmt.Errorf("SQL %q follows %s, which is not a function", firstLine(q), d.name)
	}
	start := d.f.fset.Position(fn.Pos())
	end := d.f.fset.Position(fn.End())
	lines := strings.SplitAfter(string(d.f.src), "\n")
	last := min(end.Line, start.Line+tourScreen-1)
	screen := strings.Join(lines[start.Line-1:last], "")
	if off, ok := sqlIn(screen, q); ok {
		return fmt.Sprintf("%s:%s line %d", d.f.path, d.name, strings.Count(screen[:off], "\n")+1), nil
	}
	// A constant or variable the first screen names, declared in the package.
	names := map[string]int{} // identifier -> its first line in the function
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		if id, ok := n.(*ast.Ident); ok {
			if l := d.f.fset.Position(id.Pos()).Line; l <= last {
				if _, seen := names[id.Name]; !seen {
					names[id.Name] = l - start.Line + 1
				}
			}
		}
		return true
	})
	pkg, err := packageValues(files, d.f)
	if err != nil {
		return "", err
	}
	for name, at := range names {
		if src, ok := pkg[name]; ok {
			if _, ok := sqlIn(src, q); ok {
				return fmt.Sprintf("%s:%s line %d (%s)", d.f.path, d.name, at, name), nil
			}
		}
	}
	return "", fmt.Errorf("SQL %q is not on the first screen of %s:%s, nor in a constant it names", firstLine(q), d.f.path, d.name)
}

// packageValues returns the source of every package-level constant and
// variable declared in the non-test Go files of f's folder, by name.
func packageValues(files map[string]*goFile, f *goFile) (map[string]string, error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		g, err := parseGo(f.root, files, pathpkg.Join(pathpkg.Dir(f.path), e.Name()))
		if err != nil {
			return nil, err
		}
		for _, d := range g.file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || (gd.Tok != token.CONST && gd.Tok != token.VAR) {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				text := string(g.src[g.fset.Position(vs.Pos()).Offset:g.fset.Position(vs.End()).Offset])
				for _, id := range vs.Names {
					out[id.Name] = text
				}
			}
		}
	}
	return out, nil
}

// sqlIn reports whether q, its whitespace normalised and "..." standing for
// any text, appears in src, and at which byte offset of src it starts.
func sqlIn(src, q string) (int, bool) {
	norm, offsets := normaliseSpace(src)
	pos, first := 0, -1
	for _, part := range strings.Split(q, "...") {
		p, _ := normaliseSpace(part)
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		i := strings.Index(norm[pos:], p)
		if i < 0 {
			return 0, false
		}
		if first < 0 {
			first = offsets[pos+i]
		}
		pos += i + len(p)
	}
	return max(first, 0), first >= 0
}

// normaliseSpace turns every run of white space of s into one space, and
// returns, for each byte of the result, its offset in s.
func normaliseSpace(s string) (string, []int) {
	var b strings.Builder
	var offsets []int
	space := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' {
			space = true
			continue
		}
		if space && b.Len() > 0 {
			b.WriteByte(' ')
			offsets = append(offsets, i)
		}
		space = false
		b.WriteByte(c)
		offsets = append(offsets, i)
	}
	return b.String(), offsets
}
