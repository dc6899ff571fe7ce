// Package testserver runs a real TaskForge replica inside a test, against a fresh
// PostgreSQL database and a private Redis key prefix, and offers small HTTP helpers
// for driving it. Every request and response of a test replica is checked against
// the OpenAPI document (package contract). It is imported only by tests.
package testserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/contract"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/server"
)

// Instance is one running replica.
type Instance struct {
	URL    string
	Server *server.Server
	Config server.Config
	Redis  *redis.Client
	// Signals hear of every step of the replica's background loops: tests wait on
	// them (testsignal) rather than on time. Nil when Configure removed them.
	Signals *server.TestSignals
	t       testing.TB
	cancel  context.CancelFunc
	done    chan error
}

// Options adjust a test replica. Zero values take fast test defaults.
type Options struct {
	DatabaseURL string // share a database with another replica; empty = a fresh one
	RedisAddr   string // a dedicated Redis; empty = the shared test Redis
	RedisPrefix string // share a prefix with another replica; empty = a fresh one
	Configure   func(*server.Config)
	// Log receives the replica's JSON logs at info level; nil discards them.
	Log io.Writer
	// Unchecked serves without validating the traffic against the OpenAPI document
	// (package contract), which every test replica otherwise does; benchmarks are
	// never checked.
	Unchecked bool
}

// Start runs a replica until the test ends.
func Start(t testing.TB, opts Options) *Instance {
	t.Helper()
	cfg := server.Config{
		DatabaseURL:       opts.DatabaseURL,
		RedisPrefix:       opts.RedisPrefix,
		LeaseTimeout:      5 * time.Second,
		HeartbeatInterval: time.Second,
		WatchdogInterval:  200 * time.Millisecond,
		DispatchInterval:  100 * time.Millisecond,
		BackoffBase:       100 * time.Millisecond,
		BackoffMax:        time.Second,
		// net/http's Shutdown counts a connection that never carried a request
		// (one the client's pool dialed and then did not need) as busy for its
		// first 5s, so a drain deadline of 5s or less overruns whenever a test's
		// concurrent requests leave one behind. The production default is kept.
		ShutdownTimeout: 10 * time.Second,
		TestSignals:     &server.TestSignals{},
	}
	cfg.TestSignals.Init()
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = testenv.NewDatabase(t)
	}
	addr := opts.RedisAddr
	if addr == "" {
		addr = testenv.RedisAddr(t)
	}
	if cfg.RedisPrefix == "" {
		cfg.RedisPrefix = testenv.RedisPrefix(t)
	}
	cfg.RedisURL = "redis://" + addr
	if opts.Configure != nil {
		opts.Configure(&cfg)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if opts.Log != nil {
		log = slog.New(slog.NewJSONHandler(opts.Log, nil))
	} else if os.Getenv("TASKFORGE_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := server.New(ctx, cfg, log)
	if err != nil {
		cancel()
		t.Fatalf("start replica: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		cancel()
		t.Fatalf("listen: %v", err)
	}
	inst := &Instance{URL: "http://" + ln.Addr().String(), Server: srv, Config: cfg, Signals: cfg.TestSignals, t: t, cancel: cancel,
		done: make(chan error, 1), Redis: redis.NewClient(&redis.Options{Addr: addr})}
	if tt, ok := t.(*testing.T); ok && !opts.Unchecked {
		srv.Handler = contract.Check(tt, srv.Handler)
	}
	go func() { inst.done <- srv.Serve(ctx, ln) }()
	t.Cleanup(inst.Stop)
	return inst
}

// Stop shuts the replica down and waits for it. Safe to call twice.
func (in *Instance) Stop() {
	if in.cancel == nil {
		return
	}
	in.cancel()
	in.cancel = nil
	if err := <-in.done; err != nil {
		in.t.Errorf("replica stopped with: %v", err)
	}
	in.Server.Close()
	_ = in.Redis.Close()
}

// Response is an HTTP response with its body read.
type Response struct {
	Status int
	Body   []byte
	Header http.Header
}

// JSON decodes the body into v, failing the test if it is not JSON.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("response %d is not the expected JSON (%v): %s", r.Status, err, r.Body)
	}
}

// Map decodes the body as a JSON object.
func (r Response) Map(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	r.JSON(t, &m)
	return m
}

// ErrorCode returns error.code of a JSON error body, failing if the body is not one.
func (r Response) ErrorCode(t testing.TB) string {
	t.Helper()
	var body struct {
		Error *struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	r.JSON(t, &body)
	if body.Error == nil || body.Error.Code == "" || body.Error.Message == "" {
		t.Fatalf("response %d has no {error: {code, message}}: %s", r.Status, r.Body)
	}
	return body.Error.Code
}

// Do sends a request with body (a string or []byte is sent raw; anything else as
// JSON; nil sends none) and returns the response.
func (in *Instance) Do(method, path string, body any) Response {
	return Do(in.t, in.URL, method, path, body, nil)
}

// Do sends a request to base+path. Extra headers may be given.
func Do(t testing.TB, base, method, path string, body any, header http.Header) Response {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = bytes.NewBufferString(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			t.Fatalf("encode request: %v", err)
		}
		r = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, base+path, r)
	if err != nil {
		t.Fatalf("new request: %v", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return Response{Status: resp.StatusCode, Body: data, Header: resp.Header}
}

// Must sends a request and fails the test unless the status is want.
func (in *Instance) Must(want int, method, path string, body any) Response {
	in.t.Helper()
	resp := in.Do(method, path, body)
	if resp.Status != want {
		in.t.Fatalf("%s %s: status %d, want %d: %s", method, path, resp.Status, want, resp.Body)
	}
	return resp
}

// Eventually polls cond every 10 ms until it holds or timeout passes. Where a loop
// of the replica makes cond true, wait on its signal instead (Instance.Signals:
// WaitUntil checks cond once per step of that loop); Eventually is for state no
// signal reports, such as another process's.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
