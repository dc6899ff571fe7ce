package api_test

import (
	"encoding/json"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/api"
	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/contract"
	"github.com/taskforge/taskforge/internal/testserver"
)

// TestOpenAPIDocumentIsValid loads api/openapi.yaml and validates it as OpenAPI 3.1.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	t.Parallel()
	if _, err := contract.Load(); err != nil {
		t.Fatal(err)
	}
}

var ginParam = regexp.MustCompile(`[:*]([A-Za-z0-9_]+)`)

// TestOpenAPIRouteParity fails when the router of a replica, built as package server
// builds it (API, auth, audit, dashboard), has a route the document lacks, or the
// document has one the router lacks. gin's :name and *name become {name}. Each
// operation's x-role and security must also say what auth/policy.go requires.
func TestOpenAPIRouteParity(t *testing.T) {
	t.Parallel()
	doc, err := contract.Load()
	if err != nil {
		t.Fatal(err)
	}
	s := testserver.Start(t, testserver.Options{})
	var routed []string
	for _, rt := range s.Server.API.Engine().Routes() {
		routed = append(routed, rt.Method+" "+ginParam.ReplaceAllString(rt.Path, "{$1}"))
	}
	var documented []string
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			documented = append(documented, method+" "+path)
		}
	}
	slices.Sort(routed)
	slices.Sort(documented)
	for _, r := range routed {
		if !slices.Contains(documented, r) {
			t.Errorf("the router serves %s, which api/openapi.yaml does not document", r)
		}
	}
	for _, d := range documented {
		if !slices.Contains(routed, d) {
			t.Errorf("api/openapi.yaml documents %s, which the router does not serve", d)
		}
	}
	for path, item := range doc.Paths.Map() {
		catchAll, _ := item.Extensions[contract.CatchAll].(bool)
		for method := range item.Operations() {
			var gin string
			for _, rt := range s.Server.API.Engine().Routes() {
				if rt.Method+" "+ginParam.ReplaceAllString(rt.Path, "{$1}") == method+" "+path {
					gin = rt.Path
				}
			}
			if gin != "" && strings.Contains(gin, "*") != catchAll {
				t.Errorf("%s %s: the route is %s; %s must be set exactly on catch-all routes", method, path, gin, contract.CatchAll)
			}
			if gin == "" {
				continue
			}
			op := item.GetOperation(method)
			want := "public"
			if rule, _ := auth.RuleFor(method, gin); rule.Role != auth.Public {
				want = string(rule.Role)
			}
			public := op.Security != nil && len(*op.Security) == 1 && len((*op.Security)[0]) == 0
			if role, _ := op.Extensions["x-role"].(string); role != want || public != (want == "public") {
				t.Errorf("%s %s: x-role %q and security %v; auth/policy.go says %s", method, path, role, op.Security, want)
			}
		}
	}
}

// TestOpenAPIServed checks GET /openapi.json: the document as JSON, without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	resp := s.Must(http.StatusOK, "GET", "/openapi.json", nil)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Fatalf("Content-Type %q", ct)
	}
	var doc struct {
		OpenAPI string                     `json:"openapi"`
		Paths   map[string]json.RawMessage `json:"paths"`
	}
	resp.JSON(t, &doc)
	if doc.OpenAPI != "3.1.0" || doc.Paths["/openapi.json"] == nil {
		t.Fatalf("served document: openapi %q, %d paths", doc.OpenAPI, len(doc.Paths))
	}
	if len(api.OpenAPIYAML()) == 0 {
		t.Fatal("no embedded document")
	}
}
