// Package contract holds the HTTP traffic of tests to the API's OpenAPI document
// (api/openapi.yaml). Check wraps a replica's handler: every response that goes
// through it is validated against the document, and so is the request of every
// response that is a success (2xx). Requests that fail on purpose — the 400s, 404s
// and 413s that tests send to prove the API refuses them — are left alone, while
// their error answers are still held to the document. It is imported only by tests.
//
// Traffic the document cannot judge is skipped: responses nobody reads (the
// client hung up before the answer, or 499), and bodies that are not JSON (the
// dashboard's pages and assets, the event stream, metrics), whose status and
// content type are still checked. A request to a path or method the document does
// not list must be answered 404 not_found or 405 method_not_allowed, the router's
// own answers (or gin's redirect of a trailing slash); anything else is a route
// the document lacks.
package contract

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v4"

	"github.com/taskforge/taskforge/api"
)

// CatchAll is the path item extension that marks a route whose last parameter
// spans segments (gin's *name): "/admin/assets/{path}" serves "/admin/assets/js/a.js".
const CatchAll = "x-catch-all"

// maxBody bounds how much of a request or response body is kept for validation;
// a larger body is not validated (the dashboard's event stream never ends).
const maxBody = 64 << 20

// Load parses the embedded document and validates it as OpenAPI 3.1.
func Load() (*openapi3.T, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(api.OpenAPIYAML())
	if err != nil {
		return nil, fmt.Errorf("load openapi.yaml: %w", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		return nil, fmt.Errorf("openapi.yaml is OpenAPI %s, not 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("openapi.yaml is not valid OpenAPI: %w", err)
	}
	return doc, nil
}

// checker is the loaded document with its router, built once per test binary.
type checker struct {
	doc      *openapi3.T
	router   routers.Router
	catchAll []string // templates of catch-all routes
	bodies   *bodySchemas
}

var (
	loadOnce sync.Once
	loaded   *checker
	loadErr  error
)

func load() (*checker, error) {
	loadOnce.Do(func() {
		doc, err := Load()
		if err != nil {
			loadErr = err
			return
		}
		router, err := legacy.NewRouter(doc)
		if err != nil {
			loadErr = fmt.Errorf("route openapi.yaml: %w", err)
			return
		}
		bodies, err := newBodySchemas()
		if err != nil {
			loadErr = err
			return
		}
		c := &checker{doc: doc, router: router, bodies: bodies}
		for path, item := range doc.Paths.Map() {
			if v, ok := item.Extensions[CatchAll].(bool); ok && v {
				c.catchAll = append(c.catchAll, path)
			}
		}
		loaded = c
	})
	return loaded, loadErr
}

// Check returns next wrapped so that its traffic is validated against the
// document; a mismatch fails t with the method, path, status and the validator's
// message.
func Check(t testing.TB, next http.Handler) http.Handler {
	t.Helper()
	c, err := load()
	if err != nil {
		t.Fatalf("contract: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var reqBody capped
		if r.Body != nil && r.Body != http.NoBody {
			orig := r.Body
			r.Body = struct {
				io.Reader
				io.Closer
			}{io.TeeReader(orig, &reqBody), orig}
			defer func() { r.Body = orig }()
		}
		rec := &recorder{ResponseWriter: w}
		next.ServeHTTP(rec, r)
		if r.Context().Err() != nil || rec.status() == 499 {
			return // nobody reads this answer
		}
		if rec.status()/100 == 2 && r.Body != nil {
			_, _ = io.Copy(io.Discard, r.Body) // the tee keeps what the handler left unread
		}
		if err := c.validate(r, &reqBody, rec); err != nil {
			t.Errorf("contract: %s %s → %d: %v", r.Method, r.URL.RequestURI(), rec.status(), err)
		}
	})
}

// validate checks one exchange; it returns why it breaks the document, if it does.
func (c *checker) validate(r *http.Request, reqBody *capped, rec *recorder) error {
	status := rec.status()
	route, params, err := c.findRoute(r)
	if err != nil {
		if errors.Is(err, routers.ErrPathNotFound) || errors.Is(err, routers.ErrMethodNotAllowed) ||
			strings.Contains(err.Error(), routers.ErrPathNotFound.Error()) ||
			strings.Contains(err.Error(), routers.ErrMethodNotAllowed.Error()) {
			return routerAnswer(status, rec)
		}
		return fmt.Errorf("find route: %w", err)
	}
	// kin-openapi checks parameters, status, headers and content types; bodies are
	// checked here, against schemas compiled once (kin-openapi compiles a JSON Schema
	// 2020-12 validator anew for every body, which costs milliseconds a request).
	ctx := context.Background()
	opts := &openapi3filter.Options{
		AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
		IncludeResponseStatus: true,
		MultiError:            true,
		ExcludeRequestBody:    true,
		ExcludeResponseBody:   true,
	}
	req := r.Clone(ctx)
	req.Body = http.NoBody
	input := &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route, Options: opts}
	if status/100 == 2 {
		if err := openapi3filter.ValidateRequest(ctx, input); err != nil {
			return fmt.Errorf("request: %w", err)
		}
		if !reqBody.over {
			if err := c.requestBody(route, r.Header.Get("Content-Type"), reqBody.buf.Bytes()); err != nil {
				return fmt.Errorf("request: %w", err)
			}
		}
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: input, Status: status,
		Header: rec.Header(), Options: opts}
	out.SetBodyBytes(rec.body.buf.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, out); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	if err := c.responseBody(route, status, rec); err != nil {
		return fmt.Errorf("response: %w", err)
	}
	return nil
}

// requestBody checks a request's body against its operation's schema for the
// request's content type.
func (c *checker) requestBody(route *routers.Route, contentType string, body []byte) error {
	rb := route.Operation.RequestBody
	if rb == nil || rb.Value == nil {
		if len(body) > 0 {
			return errors.New("the operation takes no body, yet the request has one")
		}
		return nil
	}
	if len(body) == 0 {
		if rb.Value.Required {
			return errors.New("the request body is required")
		}
		return nil
	}
	if contentType == "" {
		contentType = "application/json" // the API reads a body without a type as JSON
	}
	ptr := operationPointer(route) + "/requestBody"
	if rb.Ref != "" {
		ptr = rb.Ref
	}
	return c.checkBody(ptr, rb.Value.Content, contentType, body)
}

// responseBody checks a response's JSON body against the schema the operation
// gives its status and content type; other bodies only need a listed content type.
func (c *checker) responseBody(route *routers.Route, status int, rec *recorder) error {
	ref := route.Operation.Responses.Status(status)
	if ref == nil || ref.Value == nil || len(ref.Value.Content) == 0 {
		return nil
	}
	ptr := fmt.Sprintf("%s/responses/%d", operationPointer(route), status)
	if ref.Ref != "" {
		ptr = ref.Ref
	}
	if rec.body.over {
		return nil
	}
	return c.checkBody(ptr, ref.Value.Content, rec.Header().Get("Content-Type"), rec.body.buf.Bytes())
}

// checkBody checks body, of contentType, against content (found at ptr, a JSON
// pointer into the document); only JSON bodies are held to a schema.
func (c *checker) checkBody(ptr string, content openapi3.Content, contentType string, body []byte) error {
	mt := content.Get(contentType)
	if mt == nil {
		return fmt.Errorf("content type %q is not one the document lists", contentType)
	}
	if mt.Schema == nil || !isJSON(contentType) {
		return nil
	}
	key := ""
	for k, v := range content {
		if v == mt {
			key = k
		}
	}
	schema, err := c.bodies.get(ptr + "/content/" + escapePointer(key) + "/schema")
	if err != nil {
		return err
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if err := schema.Validate(v); err != nil {
		return fmt.Errorf("body %s: %w", truncate(body), err)
	}
	return nil
}

// operationPointer is the JSON pointer of route's operation in the document.
func operationPointer(route *routers.Route) string {
	return "#/paths/" + escapePointer(route.Path) + "/" + strings.ToLower(route.Method)
}

func escapePointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}

func truncate(b []byte) string {
	if len(b) > 600 {
		return string(b[:600]) + "…"
	}
	return string(b)
}

// bodySchemas compiles the document's body schemas (JSON Schema 2020-12, formats
// asserted) once each, on first use.
type bodySchemas struct {
	mu       sync.Mutex
	compiler *jsonschema.Compiler
	compiled map[string]*jsonschema.Schema
}

// documentURL names the document as a schema resource; refs inside it are local.
const documentURL = "file:///openapi.json"

func newBodySchemas() (*bodySchemas, error) {
	var doc any
	if err := yaml.Unmarshal(api.OpenAPIYAML(), &doc); err != nil {
		return nil, fmt.Errorf("openapi.yaml: %w", err)
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if doc, err = jsonschema.UnmarshalJSON(bytes.NewReader(raw)); err != nil {
		return nil, err
	}
	compiler := jsonschema.NewCompiler()
	compiler.DefaultDraft(jsonschema.Draft2020)
	compiler.AssertFormat()
	if err := compiler.AddResource(documentURL, doc); err != nil {
		return nil, err
	}
	return &bodySchemas{compiler: compiler, compiled: make(map[string]*jsonschema.Schema)}, nil
}

// get returns the schema at ptr ("#/paths/...") compiled.
func (b *bodySchemas) get(ptr string) (*jsonschema.Schema, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if s, ok := b.compiled[ptr]; ok {
		return s, nil
	}
	s, err := b.compiler.Compile(documentURL + ptr)
	if err != nil {
		return nil, fmt.Errorf("compile the schema at %s: %w", ptr, err)
	}
	b.compiled[ptr] = s
	return s, nil
}

// findRoute routes r by the document, mapping catch-all paths to their template.
// A path without parameters is looked up as it is first: kin-openapi's router
// takes "/admin/" for "/admin", which gin serves as two routes.
func (c *checker) findRoute(r *http.Request) (*routers.Route, map[string]string, error) {
	if item := c.doc.Paths.Map()[r.URL.Path]; item != nil {
		if op := item.GetOperation(r.Method); op != nil {
			return &routers.Route{Spec: c.doc, Path: r.URL.Path, PathItem: item, Method: r.Method, Operation: op},
				map[string]string{}, nil
		}
	}
	route, params, err := c.router.FindRoute(r)
	if err == nil {
		return route, params, nil
	}
	for _, tmpl := range c.catchAll {
		prefix := tmpl[:strings.LastIndex(tmpl, "{")]
		if rest, ok := strings.CutPrefix(r.URL.Path, prefix); ok && rest != "" {
			name := strings.Trim(tmpl[len(prefix):], "{}")
			probe := r.Clone(context.Background())
			probe.URL.Path, probe.URL.RawPath = prefix+"_", ""
			if route, params, err2 := c.router.FindRoute(probe); err2 == nil {
				params[name] = rest
				return route, params, nil
			}
		}
	}
	return nil, nil, err
}

// routerAnswer checks the answer to a request the document has no operation for:
// it must be the router's own 404 not_found or 405 method_not_allowed.
func routerAnswer(status int, rec *recorder) error {
	switch status {
	case http.StatusMovedPermanently, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return nil // gin's redirect of a path with or without a trailing slash
	}
	want := map[int]string{http.StatusNotFound: "not_found", http.StatusMethodNotAllowed: "method_not_allowed"}[status]
	if want == "" {
		return fmt.Errorf("no operation in the document for this method and path, yet the server answered %d", status)
	}
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal(rec.body.buf.Bytes(), &body); err != nil || body.Error.Code == "" || body.Error.Message == "" {
		return fmt.Errorf("no operation in the document; the answer is not an error body: %q", rec.body.buf.String())
	}
	if body.Error.Code != want {
		return fmt.Errorf("no operation in the document; %d with code %q, want %q", status, body.Error.Code, want)
	}
	return nil
}

func isJSON(contentType string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	return err == nil && (mt == "application/json" || strings.HasSuffix(mt, "+json"))
}

// capped is a buffer that keeps at most maxBody bytes and notes when it saw more.
type capped struct {
	buf  bytes.Buffer
	over bool
}

func (b *capped) Write(p []byte) (int, error) {
	if room := maxBody - b.buf.Len(); len(p) > room {
		b.over = true
		b.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return b.buf.Write(p)
}

// recorder passes a response through while keeping its status and body.
type recorder struct {
	http.ResponseWriter
	code int
	body capped
}

func (r *recorder) WriteHeader(code int) {
	if r.code == 0 {
		r.code = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if r.code == 0 {
		r.code = http.StatusOK
	}
	_, _ = r.body.Write(p)
	return r.ResponseWriter.Write(p)
}

// Flush lets streaming handlers (server-sent events) flush through the recorder.
func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the underlying writer.
func (r *recorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (r *recorder) status() int {
	if r.code == 0 {
		return http.StatusOK
	}
	return r.code
}
