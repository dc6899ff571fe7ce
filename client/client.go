package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/propagation"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultURL is where a TaskForge server listens by default.
const DefaultURL = "http://127.0.0.1:8080"

// Client talks to one TaskForge server (or a load balancer in front of replicas).
// It is safe for concurrent use. Methods never retry on their own: a failed call
// returns an error that matches the sentinels of this package.
type Client struct {
	base  string // scheme://host[:port][/prefix], without a trailing slash
	hc    *http.Client
	token string // API token sent as Authorization: Bearer; empty = none
}

// WithToken makes the Client authenticate every request with the API token tok
// ("tf_…"), sent as "Authorization: Bearer tok". Without it, requests carry no
// token, which works only while the server has no tokens at all.
func WithToken(tok string) Option {
	return func(c *Client) { c.token = tok }
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient makes the Client send its requests with hc (for TLS settings,
// proxies or instrumentation). hc must not set a Timeout shorter than the longest
// long-poll the Client makes; per-call deadlines come from the context.
func WithHTTPClient(hc *http.Client) Option {
	return func(c *Client) { c.hc = hc }
}

// New returns a Client for the server at baseURL, e.g. "http://127.0.0.1:8080".
// It returns an error when baseURL is not an absolute http or https URL.
func New(baseURL string, opts ...Option) (*Client, error) {
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("server URL %q: %w", baseURL, err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("server URL %q: want http://host:port or https://host:port", baseURL)
	}
	u.RawQuery, u.Fragment = "", ""
	c := &Client{base: strings.TrimRight(u.String(), "/"), hc: defaultHTTPClient}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// URL returns the server's base URL.
func (c *Client) URL() string { return c.base }

// defaultHTTPClient is shared by every Client made without WithHTTPClient: unlike
// http.DefaultClient it keeps enough idle connections per host for a worker's
// concurrent heartbeats and acks.
var defaultHTTPClient = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConnsPerHost = 64
	return &http.Client{Transport: t}
}()

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// do sends one request and decodes a 2xx JSON answer into out (when out is not nil).
// It returns the response's Date header (zero when absent) and the status.
func (c *Client) do(ctx context.Context, method, path string, query url.Values, body, out any) (time.Time, int, error) {
	return c.doWith(ctx, method, path, query, nil, body, out)
}

// preferMinimal asks the server for an answer without the task objects the caller
// does not need (RFC 7240; see POST /queues/:name/tasks/batch and /workers/ack/batch).
var preferMinimal = http.Header{"Prefer": {"return=minimal"}}

// doWith is do with extra request headers.
func (c *Client) doWith(ctx context.Context, method, path string, query url.Values, header http.Header, body, out any) (time.Time, int, error) {
	var reader io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return time.Time{}, 0, fmt.Errorf("encode request: %w", err)
		}
		reader = bytes.NewReader(b)
	}
	target := c.base + path
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, target, reader)
	if err != nil {
		return time.Time{}, 0, fmt.Errorf("build request: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	for k, vs := range header {
		req.Header[k] = vs
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	// The caller's trace (if ctx carries one) continues on the server: an enqueue
	// stores it, and the worker that runs the task joins it.
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return time.Time{}, 0, context.Cause(ctx)
		}
		return time.Time{}, 0, &unreachableError{err: err}
	}
	defer resp.Body.Close()
	date, _ := http.ParseTime(resp.Header.Get("Date"))
	if resp.StatusCode >= 300 {
		return date, resp.StatusCode, decodeError(resp)
	}
	if out == nil || resp.StatusCode == http.StatusNoContent {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		return date, resp.StatusCode, nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return date, resp.StatusCode, context.Cause(ctx)
		}
		if errors.Is(err, io.ErrUnexpectedEOF) || isNetError(err) {
			return date, resp.StatusCode, &unreachableError{err: err}
		}
		return date, resp.StatusCode, fmt.Errorf("decode %s %s response: %w", method, path, err)
	}
	return date, resp.StatusCode, nil
}

func isNetError(err error) bool {
	var ne interface{ Timeout() bool }
	return errors.As(err, &ne)
}

// decodeError turns an error response into an *APIError.
func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var body struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
			TaskID  string `json:"task_id"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body) == nil && body.Error.Code != "" {
		return &APIError{Status: resp.StatusCode, Code: body.Error.Code, Message: body.Error.Message, TaskID: body.Error.TaskID}
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" {
		msg = http.StatusText(resp.StatusCode)
	}
	return &APIError{Status: resp.StatusCode, Code: codeForStatus(resp.StatusCode), Message: msg}
}

// esc escapes one path segment.
func esc(s string) string { return url.PathEscape(s) }

// Healthz reports whether the server process answers (GET /healthz).
func (c *Client) Healthz(ctx context.Context) error {
	if _, _, err := c.do(ctx, http.MethodGet, "/healthz", nil, nil, nil); err != nil {
		return fmt.Errorf("healthz: %w", err)
	}
	return nil
}

// Readyz reports whether the server can reach PostgreSQL and Redis (GET /readyz);
// when it cannot, the error matches ErrUnavailable.
func (c *Client) Readyz(ctx context.Context) error {
	if _, _, err := c.do(ctx, http.MethodGet, "/readyz", nil, nil, nil); err != nil {
		return fmt.Errorf("readyz: %w", err)
	}
	return nil
}
