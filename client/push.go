package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// PushTarget is where a push queue delivers its tasks, as the API shows it: the
// secret is write-only, SecretSet says whether requests are signed.
type PushTarget struct {
	URL       string            `json:"url"`
	TimeoutMs int               `json:"timeout_ms"`
	Headers   map[string]string `json:"headers"`
	SecretSet bool              `json:"secret_set"`
}

// PushConfig makes a queue a push queue (QueueSettings.Push): TaskForge POSTs each
// task's payload to URL instead of waiting for a worker's poll.
type PushConfig struct {
	URL string // http or https, required
	// Timeout bounds one request (sent in milliseconds, 1ms..10m); zero takes the
	// server's default of 30s.
	Timeout time.Duration
	// Headers are sent with every request (not Content-Type, nor TaskForge-*).
	Headers map[string]string
	// Secret signs the requests (TaskForge-Signature, see VerifySignature). The
	// zero value keeps the queue's current secret; Null() removes it.
	Secret Nullable[string]
}

func (p PushConfig) body() map[string]any {
	m := map[string]any{"url": p.URL}
	if p.Timeout > 0 {
		m["timeout_ms"] = p.Timeout.Milliseconds()
	}
	if p.Headers != nil {
		m["headers"] = p.Headers
	}
	p.Secret.put(m, "secret")
	return m
}

// SignatureHeader is the header that carries a push request's signature.
const SignatureHeader = "TaskForge-Signature"

// ErrInvalidSignature: a push request's signature is missing, malformed, made with
// another secret, or too old.
var ErrInvalidSignature = errors.New("invalid TaskForge signature")

// VerifySignature checks a push request's TaskForge-Signature header against the
// queue's secret and the request's raw body: the header is
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<t>.<body>")>", and t must be
// within tolerance of now (a tolerance of zero or less skips that check, which
// leaves replayed requests undetected). Errors match ErrInvalidSignature.
func VerifySignature(secret, header string, body []byte, tolerance time.Duration) error {
	var ts string
	var macs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			macs = append(macs, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(macs) == 0 {
		return fmt.Errorf("%w: header %q is not t=<unix seconds>,v1=<hex>", ErrInvalidSignature, header)
	}
	if tolerance > 0 {
		if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
			return fmt.Errorf("%w: signed %s ago, beyond the tolerance of %s", ErrInvalidSignature, age.Round(time.Second), tolerance)
		}
	}
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts + "."))
	h.Write(body)
	want := h.Sum(nil)
	for _, m := range macs {
		if got, err := hex.DecodeString(m); err == nil && hmac.Equal(got, want) {
			return nil
		}
	}
	return fmt.Errorf("%w: no v1 signature matches the secret", ErrInvalidSignature)
}
