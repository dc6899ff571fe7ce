package dashboard

import (
	"cmp"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/storage"
)

// CSP is the Content-Security-Policy of every /admin response. Scripts, styles,
// images, fonts and connections come from this origin only; there is no inline
// script or style and no eval; the page cannot be framed; and Trusted Types make
// the browser reject any string assigned to an HTML sink such as innerHTML.
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"font-src 'self'; connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; " +
	"frame-ancestors 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

//go:embed static
var staticFiles embed.FS

// Options tune the dashboard. Zero fields take the defaults.
type Options struct {
	// StaleAfter is how long a worker may stay silent before it is shown as stale.
	// Defaults to 30s; the API uses three heartbeat intervals.
	StaleAfter time.Duration
	// Interval is the time between two snapshots of the live feed. Defaults to 1s.
	Interval time.Duration
	// Linger is how long the hub keeps computing after the last browser left, so
	// that a reload finds the chart's history. Defaults to 1 minute.
	Linger time.Duration
	// History is how much throughput history the chart keeps. Defaults to 5 minutes.
	History time.Duration
}

// WithDefaults returns o with zero fields set to their defaults.
func (o Options) WithDefaults() Options {
	o.StaleAfter = cmp.Or(o.StaleAfter, 30*time.Second)
	o.Interval = cmp.Or(o.Interval, time.Second)
	o.Linger = cmp.Or(o.Linger, time.Minute)
	o.History = cmp.Or(o.History, 5*time.Minute)
	return o
}

// Dashboard is the dashboard of one replica.
type Dashboard struct {
	store *storage.Store
	opts  Options
	log   *slog.Logger
	hub   *hub
	etags map[string]string // asset path → strong ETag
}

// Mount serves the dashboard on e under /admin and returns it. Its live feed runs
// while browsers listen, until Close. A nil log discards.
func Mount(e *gin.Engine, store *storage.Store, opts Options, log *slog.Logger) *Dashboard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts = opts.WithDefaults()
	d := &Dashboard{store: store, opts: opts, log: log, etags: make(map[string]string)}
	d.hub = newHub(d.snapshot, opts, log)
	assets, err := fs.Sub(staticFiles, "static")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	err = fs.WalkDir(assets, ".", func(path string, entry fs.DirEntry, err error) error {
		if err != nil || entry.IsDir() {
			return err
		}
		b, err := fs.ReadFile(assets, path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		d.etags[path] = `"` + hex.EncodeToString(sum[:12]) + `"`
		return nil
	})
	if err != nil {
		panic(err)
	}
	files := http.FileServerFS(assets)

	g := e.Group("/admin", securityHeaders)
	g.GET("", func(c *gin.Context) { c.Redirect(http.StatusMovedPermanently, "/admin/") })
	g.GET("/", func(c *gin.Context) { d.serveFile(c, files, "index.html") })
	g.GET("/assets/*path", func(c *gin.Context) {
		path := strings.TrimPrefix(c.Param("path"), "/")
		if path == "index.html" || path == "" {
			c.Redirect(http.StatusMovedPermanently, "/admin/")
			return
		}
		d.serveFile(c, files, path)
	})
	g.GET("/events", d.events)
	g.GET("/api/queues/:name/dlq", d.listDead)
	g.GET("/api/queues/:name/groups", d.listBusyGroups)
	return d
}

// Drain ends every live stream (GET /admin/events) and refuses new ones, so that
// an HTTP drain does not wait for them; browsers reconnect to another replica.
func (d *Dashboard) Drain() { d.hub.close() }

// Close drains the live feed and stops the goroutine computing it, waiting for it
// to end. Safe to call more than once.
func (d *Dashboard) Close() { d.hub.stop() }

// serveFile serves one embedded asset with its ETag, so browsers revalidate cheaply.
func (d *Dashboard) serveFile(c *gin.Context, files http.Handler, path string) {
	etag, ok := d.etags[path]
	if !ok {
		fail(c, http.StatusNotFound, "not_found", "no such dashboard asset")
		return
	}
	c.Header("ETag", etag)
	c.Header("Cache-Control", "no-cache")
	req := c.Request.Clone(c.Request.Context())
	req.URL.Path = "/" + path
	if path == "index.html" {
		req.URL.Path = "/" // FileServer redirects /index.html to ./
	}
	files.ServeHTTP(c.Writer, req)
}

// securityHeaders sets the CSP and its companions on every /admin response.
func securityHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", CSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	c.Next()
}

// fail writes the API's error shape: {"error": {"code", "message"}}.
func fail(c *gin.Context, status int, code, message string) {
	c.AbortWithStatusJSON(status, gin.H{"error": gin.H{"code": code, "message": message}})
}
