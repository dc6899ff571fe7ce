package auth_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/auth"
	"github.com/taskforge/taskforge/internal/testserver"
)

// BenchmarkMiddleware measures what authentication adds to a request, in process
// (no network): a bare route, then the same route behind the middleware with auth
// off (no tokens), with a valid token, and for a poll whose body is read for its
// queues.
func BenchmarkMiddleware(b *testing.B) {
	in := testserver.Start(b, testserver.Options{})
	off := auth.New(in.Server.Store, auth.Config{RateLimit: -1}, nil)
	engine := func(g *auth.Guard) *gin.Engine {
		gin.SetMode(gin.ReleaseMode)
		e := gin.New()
		if g != nil {
			e.Use(g.Middleware())
		}
		e.GET("/queues", func(c *gin.Context) { c.Status(http.StatusOK) })
		e.POST("/workers/poll", func(c *gin.Context) { c.Status(http.StatusOK) })
		return e
	}
	run := func(b *testing.B, e *gin.Engine, method, path, body, token string) {
		req := httptest.NewRequest(method, path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if body != "" {
				req.Body = http.NoBody
				req = httptest.NewRequest(method, path, strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+token)
			}
			w := httptest.NewRecorder()
			e.ServeHTTP(w, req)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d: %s", w.Code, w.Body)
			}
		}
	}
	b.Run("bare", func(b *testing.B) { run(b, engine(nil), "GET", "/queues", "", "") })
	b.Run("auth-off", func(b *testing.B) { run(b, engine(off), "GET", "/queues", "", "") })
	secret, _, err := auth.Create(context.Background(), in.Server.Store, auth.Spec{Role: auth.RoleAdmin})
	if err != nil {
		b.Fatal(err)
	}
	on := auth.New(in.Server.Store, auth.Config{RateLimit: 1e9}, nil)
	b.Run("token", func(b *testing.B) { run(b, engine(on), "GET", "/queues", "", secret) })
	poll := `{"worker_id": "w", "queues": ["a", "b"], "max_tasks": 10, "wait_ms": 0}`
	b.Run("bare-poll", func(b *testing.B) { run(b, engine(nil), "POST", "/workers/poll", poll, secret) })
	b.Run("token-poll", func(b *testing.B) { run(b, engine(on), "POST", "/workers/poll", poll, secret) })
}
