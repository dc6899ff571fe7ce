package sealer_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/taskforge/taskforge/sealer"
)

func key(id string, b byte) sealer.Key {
	return sealer.Key{ID: id, Secret: bytes.Repeat([]byte{b}, 32)}
}

func TestSealOpenRotate(t *testing.T) {
	old, err := sealer.New([]sealer.Key{key("k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	plain := json.RawMessage(`{"card":"4111-CANARY"}`)
	sealed, err := old.Seal("billing", sealer.Payload, plain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(sealed), "CANARY") || !json.Valid(sealed) {
		t.Fatalf("sealed value leaks or is not JSON: %s", sealed)
	}
	if kid, ok := sealer.KeyOf(sealed); !ok || kid != "k1" {
		t.Fatalf("KeyOf: %q %v", kid, ok)
	}
	// Rotation: a new key seals, the old one still opens.
	rotated, err := sealer.New([]sealer.Key{key("k2", 2), key("k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	got, err := rotated.Open("billing", sealer.Payload, sealed)
	if err != nil || string(got) != string(plain) {
		t.Fatalf("open after rotation: %s %v", got, err)
	}
	resealed, _ := rotated.Seal("billing", sealer.Payload, got)
	if kid, _ := sealer.KeyOf(resealed); kid != "k2" {
		t.Fatalf("resealed with %s", kid)
	}
	// Bound to queue and field; unknown keys and tampering fail.
	if _, err := rotated.Open("other", sealer.Payload, sealed); err == nil {
		t.Fatal("a payload sealed for one queue opened for another")
	}
	if _, err := rotated.Open("billing", sealer.Result, sealed); err == nil {
		t.Fatal("a payload opened as a result")
	}
	onlyNew, _ := sealer.New([]sealer.Key{key("k2", 2)})
	if _, err := onlyNew.Open("billing", sealer.Payload, sealed); err == nil {
		t.Fatal("opened without the key")
	}
	tampered := json.RawMessage(strings.Replace(string(sealed), "v1.k1.", "v1.k1.A", 1))
	if _, err := old.Open("billing", sealer.Payload, tampered); err == nil {
		t.Fatal("a tampered value opened")
	}
	// Plain values pass through.
	for _, v := range []string{`1`, `"x"`, `null`, `{"a":1}`, `{"taskforge_sealed":"plain text"}`} {
		got, err := old.Open("q", sealer.Payload, json.RawMessage(v))
		if err != nil || string(got) != v {
			t.Fatalf("plain %s: %s %v", v, got, err)
		}
	}
}

func TestParseKeysAndValidation(t *testing.T) {
	keys, err := sealer.ParseKeys("new=" + strings.Repeat("A", 43) + ", old=" + strings.Repeat("B", 44))
	if err != nil || len(keys) != 2 || keys[0].ID != "new" || len(keys[0].Secret) != 32 {
		t.Fatalf("parse: %+v %v", keys, err)
	}
	for _, bad := range [][]sealer.Key{nil, {{ID: "a", Secret: []byte("short")}}, {key("a.b", 1)}, {key("a", 1), key("a", 2)}} {
		if _, err := sealer.New(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	if _, err := sealer.ParseKeys("nokey"); err == nil {
		t.Error("accepted a key without id=")
	}
}

// TestSealOpenText: an error text round-trips through SealText/OpenText, hides its
// content, is bound to its task and field, and plain text passes through.
func TestSealOpenText(t *testing.T) {
	s, err := sealer.New([]sealer.Key{key("k1", 1)})
	if err != nil {
		t.Fatal(err)
	}
	const plain = "SMTP 550: mailbox alice@CANARY.example unknown\n\"quoted\""
	sealed, err := s.SealText("task-1", sealer.Error, plain)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "CANARY") || !sealer.IsSealedShape(json.RawMessage(sealed)) {
		t.Fatalf("sealed text leaks or is not sealed: %s", sealed)
	}
	if got, err := s.OpenText("task-1", sealer.Error, sealed); err != nil || got != plain {
		t.Fatalf("OpenText: %q %v", got, err)
	}
	if _, err := s.OpenText("task-2", sealer.Error, sealed); err == nil {
		t.Fatal("a sealed error opened as another task's")
	}
	if _, err := s.OpenText("task-1", sealer.Result, sealed); err == nil {
		t.Fatal("a sealed error opened as a result")
	}
	if got, err := s.OpenText("task-1", sealer.Error, "plain old error"); err != nil || got != "plain old error" {
		t.Fatalf("plain text: %q %v", got, err)
	}
}
