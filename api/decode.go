package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"unicode/utf8"

	"github.com/gin-gonic/gin"
)

// decode reads c's body (at most limit bytes) as one JSON value into dst, rejecting
// unknown fields, trailing data and malformed JSON with 400, and bodies over limit
// with 413. It stops reading at the limit rather than buffering an oversized body.
func decode(c *gin.Context, limit int64, dst any) error {
	_, err := decodeSized(c, limit, dst)
	return err
}

// decodeSized is decode that also returns the body's size in bytes.
func decodeSized(c *gin.Context, limit int64, dst any) (int, error) {
	if ct := c.ContentType(); ct != "" && ct != "application/json" {
		return 0, invalid("Content-Type must be application/json")
	}
	raw, err := io.ReadAll(http.MaxBytesReader(c.Writer, c.Request.Body, limit))
	if err != nil {
		return len(raw), decodeError(err, limit)
	}
	return len(raw), decodeRaw(raw, limit, dst)
}

// decodeRaw decodes raw, a whole request body, into dst as decode does.
func decodeRaw(raw []byte, limit int64, dst any) error {
	if err := storable(raw); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err, limit)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return tooLarge("request body exceeds %d bytes", limit)
		}
		return invalid("request body must hold exactly one JSON value")
	}
	return nil
}

// storable refuses bodies PostgreSQL could not store: invalid UTF-8 (which JSON
// forbids, but json.RawMessage payloads would keep) and the \u0000 escape (text
// and jsonb cannot hold NUL). Checking here, before any handler runs, keeps such a
// request from changing anything, Redis hints included.
func storable(raw []byte) error {
	if !utf8.Valid(raw) {
		return invalid("request body must be valid UTF-8")
	}
	for i := 0; ; {
		j := bytes.Index(raw[i:], []byte(`\u0000`))
		if j < 0 {
			return nil
		}
		j += i
		backslashes := 0 // an odd run ending at j is an escape; an even one, literal text
		for k := j; k >= 0 && raw[k] == '\\'; k-- {
			backslashes++
		}
		if backslashes%2 == 1 {
			return invalid(`strings must not contain \u0000 (NUL): PostgreSQL cannot store it`)
		}
		i = j + 1
	}
}

func decodeError(err error, limit int64) error {
	var maxErr *http.MaxBytesError
	var syntaxErr *json.SyntaxError
	var typeErr *json.UnmarshalTypeError
	switch {
	case errors.As(err, &maxErr):
		return tooLarge("request body exceeds %d bytes", limit)
	case errors.Is(err, io.EOF):
		return invalid("request body is empty; a JSON object is required")
	case errors.As(err, &syntaxErr), errors.Is(err, io.ErrUnexpectedEOF):
		return invalid("malformed JSON: %v", err)
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			return invalid("request body must be a JSON object")
		}
		return invalid("field %q must be %s", field, jsonType(typeErr.Type.String()))
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return invalid("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
	default:
		return invalid("invalid request body: %v", err)
	}
}

func jsonType(goType string) string {
	switch {
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	case strings.Contains(goType, "Time"):
		return "an RFC 3339 time"
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	default:
		return "of another type"
	}
}

// Nullable is an optional JSON field that distinguishes "absent" from "null".
type Nullable[T any] struct {
	Set   bool // the field was present
	Valid bool // the field was present and not null
	Value T
}

// UnmarshalJSON implements json.Unmarshaler.
func (n *Nullable[T]) UnmarshalJSON(b []byte) error {
	n.Set = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		n.Valid = false
		return nil
	}
	n.Valid = true
	return json.Unmarshal(b, &n.Value)
}

// Ptr returns the value as a pointer, nil when null.
func (n Nullable[T]) Ptr() *T {
	if !n.Valid {
		return nil
	}
	v := n.Value
	return &v
}
