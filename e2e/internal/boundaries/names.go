package boundaries

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"regexp"
	"strings"
)

// shopWord matches a service of the shop named in text: order(s), stock, shipping or
// auditor as a word of their own.
var shopWord = regexp.MustCompile(`(?i)(^|[^a-z])(orders?|stock|shipping|auditor)([^a-z]|$)`)

// sqlOrderBy is SQL's ORDER BY, which names no service.
var sqlOrderBy = regexp.MustCompile(`(?i)\border\s+by\b`)

// shopIdent matches an identifier with a service in it as one of its camel-case or
// snake-case words: OrderID, stockQueue, DefaultShippingURL, auditor_db.
var shopIdent = regexp.MustCompile(`(Orders?|Stock|Shipping|Auditor)([A-Z0-9_]|$)|(^|_)(orders?|stock|shipping|auditor)([A-Z0-9_]|$)`)

// ShopNames returns where the Go source src (file name, for the positions) names a
// service of the shop in an identifier or a string literal, one "file:line:col: what"
// each. Comments are free to give examples, and so is the shared contract: a selector
// of the contracts package (contracts.OrderPlaced) and the fields of a composite
// literal of a contracts type are not counted, nor is SQL's ORDER BY, nor module, the
// workspace's module path prefix, in a string (a fork's, github.com/acme/orders, may
// hold a service's name).
func ShopNames(file string, src []byte, module string) ([]string, error) {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, file, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		switch x := n.(type) {
		case *ast.ImportSpec:
			return false // import paths are the import rules' business
		case *ast.SelectorExpr:
			if isContracts(x) {
				return false
			}
		case *ast.CompositeLit:
			if sel, ok := x.Type.(*ast.SelectorExpr); ok && isContracts(sel) {
				for _, e := range x.Elts {
					if kv, ok := e.(*ast.KeyValueExpr); ok {
						ast.Inspect(kv.Value, func(n ast.Node) bool { return inspectValue(fset, n, module, &out) })
					} else {
						ast.Inspect(e, func(n ast.Node) bool { return inspectValue(fset, n, module, &out) })
					}
				}
				return false
			}
		}
		return inspectValue(fset, n, module, &out)
	})
	return out, nil
}

// inspectValue records a shop name in an identifier or string literal n.
func inspectValue(fset *token.FileSet, n ast.Node, module string, out *[]string) bool {
	switch x := n.(type) {
	case *ast.SelectorExpr:
		if isContracts(x) {
			return false
		}
	case *ast.BasicLit:
		v := sqlOrderBy.ReplaceAllString(strings.ReplaceAll(x.Value, module, ""), "")
		if x.Kind == token.STRING && shopWord.MatchString(v) {
			*out = append(*out, fmt.Sprintf("%s: string %s", fset.Position(x.Pos()), short(x.Value)))
		}
	case *ast.Ident:
		if shopIdent.MatchString(x.Name) {
			*out = append(*out, fmt.Sprintf("%s: identifier %s", fset.Position(x.Pos()), x.Name))
		}
	}
	return true
}

func isContracts(sel *ast.SelectorExpr) bool {
	id, ok := sel.X.(*ast.Ident)
	return ok && id.Name == "contracts"
}

func short(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
