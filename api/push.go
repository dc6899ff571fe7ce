package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/textproto"
	"net/url"
	"strings"

	"github.com/taskforge/taskforge/storage"
)

// Bounds of a push target (docs/push.md).
const (
	maxPushTimeoutMs     = 600_000
	defaultPushTimeoutMs = 30_000
	maxPushURLLen        = 2048
	maxPushHeaders       = 32
	maxPushHeaderBytes   = 8 << 10 // names and values of all configured headers
	maxPushSecretLen     = 1024
)

// pushSettings is the push field of a queue request. An object replaces the
// target; its secret, when absent, stays as it was, and null removes it.
type pushSettings struct {
	URL       *string           `json:"url"`
	TimeoutMs *int              `json:"timeout_ms"`
	Headers   map[string]string `json:"headers"`
	Secret    Nullable[string]  `json:"secret"`
}

// UnmarshalJSON rejects unknown fields, as every request body does.
func (p *pushSettings) UnmarshalJSON(b []byte) error {
	type plain pushSettings
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var v plain
	if err := dec.Decode(&v); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	*p = pushSettings(v)
	return nil
}

// reservedPushHeaders are set by the pusher itself and may not be configured.
var reservedPushHeaders = map[string]bool{
	"Content-Type": true, "Content-Length": true, "Host": true, "Transfer-Encoding": true,
	"Connection": true, "Te": true, "Trailer": true, "Upgrade": true, "Keep-Alive": true,
	"Proxy-Connection": true, "Expect": true,
}

// applyPush validates the push field and writes it into q: null makes q a pull
// queue (and forgets its secret).
func applyPush(n Nullable[pushSettings], q *storage.Queue) error {
	if !n.Valid {
		q.Push, q.PushSecret = nil, nil
		return nil
	}
	p := n.Value
	if p.URL == nil {
		return invalid("push.url is required (an http or https URL), or push: null for a pull queue")
	}
	u, err := url.Parse(*p.URL)
	switch {
	case len(*p.URL) > maxPushURLLen:
		return invalid("push.url must be at most %d characters", maxPushURLLen)
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "":
		return invalid("push.url must be an absolute http or https URL, got %q", *p.URL)
	case u.User != nil:
		return invalid("push.url must not carry credentials; send them in push.headers (e.g. Authorization)")
	case u.Fragment != "":
		return invalid("push.url must not have a fragment")
	}
	timeout := defaultPushTimeoutMs
	if p.TimeoutMs != nil {
		if timeout = *p.TimeoutMs; timeout < 1 || timeout > maxPushTimeoutMs {
			return invalid("push.timeout_ms must be an integer from 1 to %d", maxPushTimeoutMs)
		}
	}
	if len(p.Headers) > maxPushHeaders {
		return invalid("push.headers may hold at most %d headers", maxPushHeaders)
	}
	headers := make(map[string]string, len(p.Headers))
	size := 0
	for name, value := range p.Headers {
		canon := textproto.CanonicalMIMEHeaderKey(name)
		switch {
		case !validHeaderName(name):
			return invalid("push.headers: %q is not a valid header name", name)
		case strings.ContainsAny(value, "\r\n\x00"):
			return invalid("push.headers: the value of %s holds characters a header may not", name)
		case reservedPushHeaders[canon] || strings.HasPrefix(canon, "Taskforge-"):
			return invalid("push.headers: %s is set by TaskForge and may not be configured", name)
		}
		if _, dup := headers[canon]; dup {
			return invalid("push.headers: %s is given twice", canon)
		}
		size += len(name) + len(value)
		headers[canon] = value
	}
	if size > maxPushHeaderBytes {
		return invalid("push.headers must total at most %d bytes", maxPushHeaderBytes)
	}
	switch {
	case !p.Secret.Set: // keep the current secret, if the queue pushed already
		if q.Push == nil {
			q.PushSecret = nil
		}
	case !p.Secret.Valid:
		q.PushSecret = nil
	case p.Secret.Value == "" || len(p.Secret.Value) > maxPushSecretLen:
		return invalid("push.secret must be 1 to %d characters, or null for unsigned requests", maxPushSecretLen)
	default:
		secret := p.Secret.Value
		q.PushSecret = &secret
	}
	q.Push = &storage.PushTarget{URL: *p.URL, TimeoutMs: timeout, Headers: headers, SecretSet: q.PushSecret != nil}
	return nil
}

// notPush refuses a poll naming a push queue: its tasks go to its HTTP target.
func (s *Server) notPush(ctx context.Context, queue string) error {
	l, ok, err := s.limits.Get(ctx, queue)
	if err != nil || !ok || !l.Push {
		return nil // the claim meets the error, or skips the unknown queue
	}
	return invalid("queue %q delivers its tasks to an HTTP target (push); it cannot be polled", queue)
}

// ParkForWork registers the caller as waiting for work buffered for one of
// queues: woken closes when some arrives (or the replica drains). Park before the
// last look for work, so that a wake-up between the two is not lost, and call leave
// when done waiting.
func (s *Server) ParkForWork(queues []string) (woken <-chan struct{}, leave func()) {
	w := s.hub.park(queues)
	return w.ch, func() { s.hub.leave(w) }
}

// validHeaderName reports whether name is an HTTP token (RFC 9110, 5.6.2).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9':
		case strings.ContainsRune("!#$%&'*+-.^_`|~", r):
		default:
			return false
		}
	}
	return true
}
