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

// variantPairs are the statements kept in two variants that differ only in the
// columns they read back (each variant's header cites the figure that keeps it):
// in the column list of the clause that starts at the last occurrence of clause
// (RETURNING or SELECT) within the part of the body after the last occurrence of
// within, up to end.
var variantPairs = []struct {
	whole, refs         string
	within, clause, end string
}{
	{whole: "enqueue_tasks", refs: "enqueue_task_refs", within: "\n), ins AS (", clause: "RETURNING ", end: "\n), tallied AS ("},
	{whole: "ack_plain_tasks", refs: "ack_plain_task_refs", within: "\n)\nSELECT ", clause: "SELECT ", end: " FROM acked"},
}

// columnList matches a list of columns: names, casts and aliases (no operator,
// call or parenthesis), and notCase a CASE, so that no rule hides in the list.
var (
	columnList = regexp.MustCompile(`^[A-Za-z0-9_.:\s,]+$`)
	notCase    = regexp.MustCompile(`\b(CASE|WHEN|THEN|ELSE|END)\b`)
)

// TestVariantsShareTheirStatement: each statement kept in two variants is written
// once in effect: the variants' SQL is identical apart from the header comment and
// the column list they read back, so that a change of the rule made to one and not
// the other fails here.
func TestVariantsShareTheirStatement(t *testing.T) {
	for _, p := range variantPairs {
		whole := maskColumns(t, p.whole, statements[p.whole], p.within, p.clause, p.end)
		refs := maskColumns(t, p.refs, statements[p.refs], p.within, p.clause, p.end)
		if whole == refs {
			continue
		}
		a, b := strings.Split(whole, "\n"), strings.Split(refs, "\n")
		for i := 0; i < max(len(a), len(b)); i++ {
			la, lb := lineAt(a, i), lineAt(b, i)
			if la != lb {
				t.Errorf("sql/%s.sql and sql/%s.sql differ beyond the columns they return, first at line %d of their SQL:\n%s\n%s",
					p.whole, p.refs, i+1, la, lb)
				break
			}
		}
	}
}

func lineAt(lines []string, i int) string {
	if i < len(lines) {
		return lines[i]
	}
	return "(end)"
}

// maskColumns returns the SQL of statement name (body, without its header) with
// the column list of its clause (see variantPairs) replaced by "…", failing the
// test when the clause is not found or its list holds more than columns.
func maskColumns(t *testing.T, name, body, within, clause, end string) string {
	t.Helper()
	body = statementBody(body)
	from := strings.LastIndex(body, within)
	if from < 0 {
		t.Fatalf("sql/%s.sql: no %q", name, within)
	}
	start := strings.LastIndex(body[from:], clause)
	if start < 0 {
		t.Fatalf("sql/%s.sql: no %q after %q", name, clause, within)
	}
	start += from + len(clause)
	n := strings.Index(body[start:], end)
	if n < 0 {
		t.Fatalf("sql/%s.sql: no %q after its %s", name, end, clause)
	}
	if cols := body[start : start+n]; !columnList.MatchString(cols) || notCase.MatchString(cols) {
		t.Fatalf("sql/%s.sql: its %sholds more than columns: %q", name, clause, cols)
	}
	return body[:start] + "…" + body[start+n:]
}
