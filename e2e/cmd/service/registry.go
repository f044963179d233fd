package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// entry is the registry entry of the service d describes, a contracts.Service composite
// literal after a comment that says what the service does.
func entry(d data) string {
	var b strings.Builder
	what := "records every event it receives"
	switch {
	case !d.Consumer:
		what = "takes records over HTTP and publishes " + d.Event + " for each"
	case d.Producer:
		what += " and publishes " + d.Event + " for each event of another producer"
	}
	line := "//"
	for w := range strings.FieldsSeq(d.Name + " " + what + ".") {
		if len(line)+1+len(w) > 88 { // the entry is indented by two tabs
			b.WriteString(line + "\n")
			line = "//"
		}
		line += " " + w
	}
	b.WriteString(line + "\n")
	fmt.Fprintf(&b, "{Name: %q, Database: %q, HTTPAddr: %q", d.Name, d.Name, ":"+d.Port)
	if d.Producer {
		fmt.Fprintf(&b, ", RelayAddr: %q,\nPublishes: []string{%s}", ":"+d.RelayPort, d.EventConst)
	}
	if !d.Consumer {
		b.WriteString("},\n")
		return b.String()
	}
	consts := make([]string, len(d.Receives))
	for i, r := range d.Receives {
		consts[i] = strings.TrimPrefix(r.Const, "contracts.")
	}
	fmt.Fprintf(&b, ",\nReceives: []string{%s}},\n", strings.Join(consts, ", "))
	return b.String()
}

// addEntry returns src, the source of contracts/registry.go, with elem added as the last
// element of the slice that Services returns, gofmt'ed. It fails when src has no func
// Services returning a []Service composite literal.
func addEntry(src []byte, elem string) ([]byte, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "registry.go", src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	lit, err := servicesLiteral(f)
	if err != nil {
		return nil, err
	}
	rbrace := fset.Position(lit.Rbrace)
	var at int
	var text string
	if n := len(lit.Elts); n == 0 || fset.Position(lit.Elts[n-1].End()).Line == rbrace.Line {
		// }, on the line of the last element, or of the opening brace
		at, text = rbrace.Offset, ",\n"+elem
		if n == 0 {
			text = "\n" + elem
		}
	} else {
		at, text = rbrace.Offset-(rbrace.Column-1), elem // the start of the line of }
	}
	out := bytes.Join([][]byte{src[:at], []byte(text), src[at:]}, nil)
	formatted, err := format.Source(out)
	if err != nil {
		return nil, fmt.Errorf("the entry does not fit: %w", err)
	}
	return formatted, nil
}

// servicesLiteral finds, in the registry's file, the []Service composite literal that func
// Services returns.
func servicesLiteral(f *ast.File) (*ast.CompositeLit, error) {
	for _, decl := range f.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Name.Name != "Services" || fn.Body == nil {
			continue
		}
		for _, stmt := range fn.Body.List {
			ret, ok := stmt.(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			lit, ok := ret.Results[0].(*ast.CompositeLit)
			if !ok {
				continue
			}
			if at, ok := lit.Type.(*ast.ArrayType); ok && at.Len == nil {
				if id, ok := at.Elt.(*ast.Ident); ok && id.Name == "Service" {
					return lit, nil
				}
			}
		}
		return nil, fmt.Errorf("func Services does not return a []Service{...} literal")
	}
	return nil, fmt.Errorf("no func Services")
}

// firstProducerEvents returns the name of the first service of the registry with a
// Publishes list, and the constants (EventOrderPlaced, ...) that list names, in their
// order: the events a new consumer receives.
func firstProducerEvents(root string) (string, []string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(root, "contracts", "registry.go"), nil, 0)
	if err != nil {
		return "", nil, err
	}
	lit, err := servicesLiteral(f)
	if err != nil {
		return "", nil, fmt.Errorf("contracts/registry.go: %w", err)
	}
	for _, e := range lit.Elts {
		svc, ok := e.(*ast.CompositeLit)
		if !ok {
			continue
		}
		fields := map[string]ast.Expr{}
		for _, field := range svc.Elts {
			if kv, ok := field.(*ast.KeyValueExpr); ok {
				if key, ok := kv.Key.(*ast.Ident); ok {
					fields[key.Name] = kv.Value
				}
			}
		}
		events, ok := fields["Publishes"].(*ast.CompositeLit)
		if !ok || len(events.Elts) == 0 {
			continue
		}
		name, _ := fields["Name"].(*ast.BasicLit)
		if name == nil || name.Kind != token.STRING {
			return "", nil, fmt.Errorf("contracts/registry.go: the first producer's Name is not a string literal")
		}
		var consts []string
		for _, ev := range events.Elts {
			id, ok := ev.(*ast.Ident)
			if !ok {
				return "", nil, fmt.Errorf("contracts/registry.go: the first producer's Publishes names an event by something other than its constant")
			}
			consts = append(consts, id.Name)
		}
		n, _ := strconv.Unquote(name.Value)
		return n, consts, nil
	}
	return "", nil, fmt.Errorf("contracts/registry.go: no service publishes, so a consumer would receive nothing")
}

// contractTypes returns the names of the types that package contracts declares.
func contractTypes(root string) (map[string]bool, error) {
	names, err := filepath.Glob(filepath.Join(root, "contracts", "*.go"))
	if err != nil {
		return nil, err
	}
	types := map[string]bool{}
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					types[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	return types, nil
}

// checkEventConst checks that contracts/events.go, which go generate writes from the
// schemas, declares ident as the event's name.
func checkEventConst(root, ident, event string) error {
	name := filepath.Join(root, "contracts", "events.go")
	src, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	f, err := parser.ParseFile(token.NewFileSet(), name, src, parser.SkipObjectResolution)
	if err != nil {
		return err
	}
	for _, decl := range f.Decls {
		g, ok := decl.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, s := range g.Specs {
			v := s.(*ast.ValueSpec)
			for i, n := range v.Names {
				if n.Name != ident || i >= len(v.Values) {
					continue
				}
				if lit, ok := v.Values[i].(*ast.BasicLit); ok && lit.Value == strconv.Quote(event) {
					return nil
				}
			}
		}
	}
	return fmt.Errorf("contracts/events.go: go generate declared no %s = %q", ident, event)
}
