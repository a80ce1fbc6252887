package scan

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// parseGo finds the functions `go test` runs as tests: top-level
// `func TestXxx(t *testing.T)` where Xxx does not start with a lower-case
// letter. Benchmarks, examples, fuzz targets, methods and helpers with other
// signatures do not count.
func parseGo(name string, src []byte) ([]Test, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}

	testingName := ""
	for _, imp := range file.Imports {
		if p, _ := strconv.Unquote(imp.Path.Value); p == "testing" {
			testingName = "testing"
			if imp.Name != nil {
				testingName = imp.Name.Name
			}
		}
	}
	if testingName == "" || testingName == "_" {
		return nil, nil
	}

	var tests []Test
	for _, decl := range file.Decls {
		fn, ok := decl.(*ast.FuncDecl)
		if !ok || fn.Recv != nil || fn.Type.TypeParams != nil || !isTestName(fn.Name.Name) {
			continue
		}
		if fn.Type.Results != nil && len(fn.Type.Results.List) > 0 {
			continue
		}
		if !takesOnlyTestingT(fn.Type.Params, testingName) {
			continue
		}
		tests = append(tests, Test{File: name, Name: fn.Name.Name, Framework: Go, Line: fset.Position(fn.Pos()).Line})
	}
	return tests, nil
}

// isTestName applies go test's rule: "Test", or "Test" followed by a rune
// that is not lower case.
func isTestName(name string) bool {
	rest, ok := cutPrefix(name, "Test")
	if !ok {
		return false
	}
	if rest == "" {
		return true
	}
	r, _ := utf8.DecodeRuneInString(rest)
	return !unicode.IsLower(r)
}

func cutPrefix(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return s, false
	}
	return s[len(prefix):], true
}

// takesOnlyTestingT reports whether params is exactly one *testing.T (with the
// testing package imported under testingName; "." for a dot import).
func takesOnlyTestingT(params *ast.FieldList, testingName string) bool {
	if params == nil || len(params.List) != 1 || len(params.List[0].Names) > 1 {
		return false
	}
	star, ok := params.List[0].Type.(*ast.StarExpr)
	if !ok {
		return false
	}
	switch t := star.X.(type) {
	case *ast.SelectorExpr:
		pkg, ok := t.X.(*ast.Ident)
		return ok && pkg.Name == testingName && t.Sel.Name == "T"
	case *ast.Ident:
		return testingName == "." && t.Name == "T"
	}
	return false
}
