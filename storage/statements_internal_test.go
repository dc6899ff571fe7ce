package storage

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestStatementFiles: every file of sql/ is loaded, by a variable some code of the
// package uses; each file starts with a header naming it, documenting every $n
// parameter its SQL uses and saying what it returns; and the channel the
// statements notify is DueChannel.
func TestStatementFiles(t *testing.T) {
	files, err := fs.Glob(statementFiles, "sql/*.sql")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".sql")
		names = append(names, name)
		if _, ok := statements[name]; !ok {
			t.Errorf("sql/%s.sql is loaded by no mustLoad", name)
		}
		b, err := statementFiles.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		checkHeader(t, name, string(b))
	}
	for name := range statements {
		if !slices.Contains(names, name) {
			t.Errorf("statement %s has no file", name)
		}
	}
	for v := range unusedStatementVars(t) {
		t.Errorf("statement variable %s is used nowhere in the package", v)
	}
}

var paramRef = regexp.MustCompile(`\$(\d+)`)

func checkHeader(t *testing.T, name, file string) {
	t.Helper()
	lines := strings.Split(file, "\n")
	if lines[0] != "-- name: "+name {
		t.Errorf("sql/%s.sql: first line is %q, not -- name: %s", name, lines[0], name)
	}
	var header []string
	for _, l := range lines {
		if !strings.HasPrefix(l, "--") {
			break
		}
		header = append(header, l)
	}
	head := strings.Join(header, "\n")
	body := strings.TrimSpace(statementBody(file))
	documented := map[string]bool{}
	for _, l := range header {
		if rest, ok := strings.CutPrefix(l, "--   $"); ok {
			n, _, _ := strings.Cut(rest, " ")
			documented[n] = true
		}
	}
	used := map[string]bool{}
	for _, m := range paramRef.FindAllStringSubmatch(body, -1) {
		used[m[1]] = true
		if !documented[m[1]] {
			t.Errorf("sql/%s.sql uses $%s, which its header does not document", name, m[1])
		}
	}
	for n := range documented {
		if !used[n] {
			t.Errorf("sql/%s.sql documents $%s, which its SQL does not use", name, n)
		}
	}
	if len(used) == 0 && !strings.Contains(head, "-- Parameters: none.") {
		t.Errorf("sql/%s.sql takes no parameter but does not say so", name)
	}
	if !strings.Contains(head, "-- Returns: ") {
		t.Errorf("sql/%s.sql does not say what it returns", name)
	}
	if strings.Contains(body, "pg_notify('") && !strings.Contains(body, "pg_notify('"+DueChannel+"'") ||
		strings.HasPrefix(body, "LISTEN") && body != "LISTEN "+DueChannel {
		t.Errorf("sql/%s.sql names a channel other than %s", name, DueChannel)
	}
}

// unusedStatementVars are the variables set by mustLoad that no other code of the
// package (tests aside) mentions.
func unusedStatementVars(t *testing.T) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	loaded := map[string]bool{}
	var uses []*ast.Ident
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, e.Name(), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				if len(n.Values) == 1 {
					if c, ok := n.Values[0].(*ast.CallExpr); ok {
						if fn, ok := c.Fun.(*ast.Ident); ok && fn.Name == "mustLoad" {
							loaded[n.Names[0].Name] = true
							return false
						}
					}
				}
			case *ast.Ident:
				uses = append(uses, n)
			}
			return true
		})
	}
	for _, id := range uses {
		delete(loaded, id.Name)
	}
	return loaded
}
