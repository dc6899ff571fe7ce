// Package sealer encrypts task payloads, results, progress reports and error texts at rest with AES-256-GCM.
//
// A sealed value is stored in place of the JSON it hides, as a JSON object with one
// reserved key:
//
//	{"taskforge_sealed": "v1.<key id>.<base64url(nonce ‖ ciphertext)>"}
//
// so the column keeps its type and the key id travels with every row, which lets keys
// rotate: the first key of a Sealer seals, every key opens. The additional data binds
// a value to its field and a binding string (a payload to its queue, which replays
// keep; a result to its task id), so a sealed value cannot be passed off as another
// queue's payload, another task's result, or a result as a payload. Values that are not sealed are returned as they are, so
// turning encryption on needs no migration (`taskforge keys rotate` seals old rows).
package sealer

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// Field names what a sealed value is, as part of its additional data.
type Field string

// The fields TaskForge seals.
const (
	Payload Field = "payload"
	Result  Field = "result"
	// Progress is what a worker reported with a heartbeat, bound to its task.
	Progress Field = "progress"
	// Error is a worker's error text (a nack) or reason (a release), bound to its task.
	Error Field = "error"
	// PushSecret is a push queue's signing secret, bound to its queue.
	PushSecret Field = "push_secret"
)

const (
	reservedKey = "taskforge_sealed"
	version     = "v1"
)

// Key is one AES-256 key with its id.
type Key struct {
	ID     string // short, [A-Za-z0-9_-]
	Secret []byte // 32 bytes
}

// Sealer seals with its first key and opens with any of its keys.
type Sealer struct {
	current string
	aeads   map[string]cipher.AEAD
}

// New returns a Sealer; keys[0] seals new values.
func New(keys []Key) (*Sealer, error) {
	if len(keys) == 0 {
		return nil, errors.New("sealer: no keys")
	}
	s := &Sealer{current: keys[0].ID, aeads: make(map[string]cipher.AEAD, len(keys))}
	for _, k := range keys {
		if k.ID == "" || strings.ContainsAny(k.ID, ".\"\\ ") {
			return nil, fmt.Errorf("sealer: key id %q must be non-empty without dots, quotes or spaces", k.ID)
		}
		if len(k.Secret) != 32 {
			return nil, fmt.Errorf("sealer: key %s is %d bytes, want 32 (AES-256)", k.ID, len(k.Secret))
		}
		if _, dup := s.aeads[k.ID]; dup {
			return nil, fmt.Errorf("sealer: key id %s given twice", k.ID)
		}
		block, err := aes.NewCipher(k.Secret)
		if err != nil {
			return nil, fmt.Errorf("sealer: key %s: %w", k.ID, err)
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, fmt.Errorf("sealer: key %s: %w", k.ID, err)
		}
		s.aeads[k.ID] = aead
	}
	return s, nil
}

// ParseKeys reads "id=base64key,id2=base64key" (standard or URL base64, padded or not).
func ParseKeys(spec string) ([]Key, error) {
	var keys []Key
	for _, item := range strings.FieldsFunc(spec, func(r rune) bool { return r == ',' || r == '\n' }) {
		id, b64, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok {
			return nil, fmt.Errorf("sealer: key %q is not id=base64", item)
		}
		secret, err := decodeBase64(strings.TrimSpace(b64))
		if err != nil {
			return nil, fmt.Errorf("sealer: key %s: %w", id, err)
		}
		keys = append(keys, Key{ID: strings.TrimSpace(id), Secret: secret})
	}
	return keys, nil
}

func decodeBase64(s string) ([]byte, error) {
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if b, err := enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, errors.New("not base64")
}

// CurrentKey is the id of the key that seals.
func (s *Sealer) CurrentKey() string { return s.current }

func aad(binding string, field Field) []byte {
	return []byte("taskforge/" + version + "/" + string(field) + "/" + binding)
}

// Seal returns the sealed form of plain (a JSON value), bound to binding and field.
// A nil or empty value stays so.
func (s *Sealer) Seal(binding string, field Field, plain json.RawMessage) (json.RawMessage, error) {
	if len(plain) == 0 {
		return plain, nil
	}
	aead := s.aeads[s.current]
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plain)+aead.Overhead())
	if _, err := rand.Read(nonce); err != nil {
		return nil, fmt.Errorf("sealer: nonce: %w", err)
	}
	sealed := aead.Seal(nonce, nonce, plain, aad(binding, field))
	return json.Marshal(map[string]string{reservedKey: version + "." + s.current + "." + base64.RawURLEncoding.EncodeToString(sealed)})
}

// KeyOf returns the id of the key that sealed v, and false when v is not sealed.
func KeyOf(v json.RawMessage) (string, bool) {
	token, ok := sealedToken(v)
	if !ok {
		return "", false
	}
	parts := strings.SplitN(token, ".", 3)
	return parts[1], true
}

// sealedToken returns the string inside a sealed value.
func sealedToken(v json.RawMessage) (string, bool) {
	trimmed := bytes.TrimSpace(v)
	if len(trimmed) == 0 || trimmed[0] != '{' || !bytes.Contains(trimmed, []byte(reservedKey)) {
		return "", false
	}
	var m map[string]string
	if err := json.Unmarshal(trimmed, &m); err != nil || len(m) != 1 {
		return "", false
	}
	token, ok := m[reservedKey]
	if !ok || strings.Count(token, ".") < 2 || !strings.HasPrefix(token, version+".") {
		return "", false
	}
	return token, true
}

// Open returns the plain JSON of v, sealed for binding and field; a value that is not
// sealed is returned as it is.
func (s *Sealer) Open(binding string, field Field, v json.RawMessage) (json.RawMessage, error) {
	token, ok := sealedToken(v)
	if !ok {
		return v, nil
	}
	parts := strings.SplitN(token, ".", 3)
	aead, known := s.aeads[parts[1]]
	if !known {
		return nil, fmt.Errorf("sealer: value sealed with unknown key %q", parts[1])
	}
	raw, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, errors.New("sealer: malformed sealed value")
	}
	plain, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], aad(binding, field))
	if err != nil {
		return nil, fmt.Errorf("sealer: open value sealed with key %s: %w", parts[1], err)
	}
	return plain, nil
}

// SealText returns the sealed form of a text (stored in a text column), bound to
// binding and field: the sealed JSON of the text as a JSON string.
func (s *Sealer) SealText(binding string, field Field, plain string) (string, error) {
	v, err := json.Marshal(plain)
	if err != nil {
		return "", fmt.Errorf("sealer: %w", err)
	}
	sealed, err := s.Seal(binding, field, v)
	return string(sealed), err
}

// OpenText returns the plain text of v, sealed by SealText for binding and field; a
// text that is not sealed is returned as it is.
func (s *Sealer) OpenText(binding string, field Field, v string) (string, error) {
	if !IsSealedShape(json.RawMessage(v)) {
		return v, nil
	}
	plain, err := s.Open(binding, field, json.RawMessage(v))
	if err != nil {
		return "", err
	}
	var text string
	if err := json.Unmarshal(plain, &text); err != nil {
		return "", fmt.Errorf("sealer: sealed text is not a JSON string: %w", err)
	}
	return text, nil
}

// IsSealedShape reports whether a plain value would be mistaken for a sealed one.
// Producers must not send such payloads while encryption is on.
func IsSealedShape(v json.RawMessage) bool {
	_, ok := sealedToken(v)
	return ok
}
