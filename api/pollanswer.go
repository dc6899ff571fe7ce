package api

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/taskforge/taskforge/client/wire"
)

// writePollAnswer answers a poll with body as c.JSON would, the same bytes
// (appendPollResponse), without encoding/json's reflection over every task: on
// the polls of batched workers, a hundred tasks each, that encoding was a tenth
// of serve's CPU.
func writePollAnswer(c *gin.Context, body wire.PollResponse) {
	b, ok := appendPollResponse(make([]byte, 0, 256*len(body.Tasks)+64), body)
	if !ok {
		c.JSON(http.StatusOK, body)
		return
	}
	c.Data(http.StatusOK, "application/json; charset=utf-8", b)
}

// appendPollResponse appends r to b as encoding/json marshals it (fields in
// order, omitempty, HTML-safe escaping, payloads compacted), or reports false
// when some value needs encoding/json itself to say what it makes of it (a
// payload that is not valid JSON, a time it cannot write).
func appendPollResponse(b []byte, r wire.PollResponse) ([]byte, bool) {
	b = append(b, `{"tasks":`...)
	if r.Tasks == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Tasks {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = appendPolledTask(b, &r.Tasks[i]); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	if r.RetryAfterMs != 0 {
		b = append(b, `,"retry_after_ms":`...)
		b = strconv.AppendInt(b, r.RetryAfterMs, 10)
	}
	if len(r.Acks) > 0 {
		acks, err := json.Marshal(r.Acks) // few, and often with errors: as they are
		if err != nil {
			return nil, false
		}
		b = append(b, `,"acks":`...)
		b = append(b, acks...)
	}
	return append(b, '}'), true
}

func appendPolledTask(b []byte, t *wire.PolledTask) ([]byte, bool) {
	b = append(b, `{"id":`...)
	b = appendJSONString(b, t.ID)
	b = append(b, `,"queue":`...)
	b = appendJSONString(b, t.Queue)
	b = append(b, `,"payload":`...)
	var ok bool
	if b, ok = appendRawJSON(b, t.Payload); !ok {
		return nil, false
	}
	b = append(b, `,"priority":`...)
	b = strconv.AppendInt(b, int64(t.Priority), 10)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(t.Attempt), 10)
	b = append(b, `,"lease_token":`...)
	b = appendJSONString(b, t.LeaseToken)
	b = append(b, `,"lease_expires_at":`...)
	if b, ok = appendJSONTime(b, t.LeaseExpiresAt); !ok {
		return nil, false
	}
	b = append(b, `,"heartbeat_interval_ms":`...)
	b = strconv.AppendInt(b, t.HeartbeatIntervalMs, 10)
	b = append(b, `,"timeout_seconds":`...)
	if t.TimeoutSeconds == nil {
		b = append(b, "null"...)
	} else {
		b = strconv.AppendInt(b, int64(*t.TimeoutSeconds), 10)
	}
	b = append(b, `,"traceparent":`...)
	b = appendJSONStringPtr(b, t.Traceparent)
	b = append(b, `,"workflow_id":`...)
	b = appendJSONStringPtr(b, t.WorkflowID)
	b = append(b, `,"step":`...)
	b = appendJSONStringPtr(b, t.Step)
	b = append(b, `,"group":`...)
	b = appendJSONStringPtr(b, t.Group)
	return append(b, '}'), true
}

// appendJSONString appends s as encoding/json writes a string: as it is when
// every byte is printable ASCII that needs no escape, else through encoding/json.
func appendJSONString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			q, _ := json.Marshal(s) // a string always marshals
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

func appendJSONStringPtr(b []byte, s *string) []byte {
	if s == nil {
		return append(b, "null"...)
	}
	return appendJSONString(b, *s)
}

// appendRawJSON appends raw as encoding/json writes a json.RawMessage: null when
// nil, else compacted, with <, >, & and U+2028/U+2029 escaped (only through
// encoding/json when it holds any of them).
func appendRawJSON(b []byte, raw json.RawMessage) ([]byte, bool) {
	if raw == nil {
		return append(b, "null"...), true
	}
	if bytes.ContainsAny(raw, "<>&\u2028\u2029") {
		m, err := json.Marshal(raw)
		return append(b, m...), err == nil
	}
	buf := bytes.NewBuffer(b)
	if err := json.Compact(buf, raw); err != nil {
		return nil, false
	}
	return buf.Bytes(), true
}

// appendJSONTime appends t as time.Time's MarshalJSON writes it (RFC 3339 with
// nanoseconds, quoted).
func appendJSONTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, false
	}
	return append(b, '"'), true
}
