package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
)

func sign(secret string, t time.Time, body string) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte(ts + "." + body))
	return "t=" + ts + ",v1=" + hex.EncodeToString(h.Sum(nil))
}

func TestVerifySignature(t *testing.T) {
	body := `{"n":1}`
	now := time.Now()
	good := sign("s3cret", now, body)
	if err := client.VerifySignature("s3cret", good, []byte(body), 5*time.Minute); err != nil {
		t.Fatalf("a good signature: %v", err)
	}
	for name, tc := range map[string]struct{ secret, header, body string }{
		"another secret": {"other", good, body},
		"another body":   {"s3cret", good, `{"n":2}`},
		"too old":        {"s3cret", sign("s3cret", now.Add(-10*time.Minute), body), body},
		"malformed":      {"s3cret", "v1=abc", body},
		"empty":          {"s3cret", "", body},
	} {
		if err := client.VerifySignature(tc.secret, tc.header, []byte(tc.body), 5*time.Minute); !errors.Is(err, client.ErrInvalidSignature) {
			t.Errorf("%s: %v, want ErrInvalidSignature", name, err)
		}
	}
	old := sign("s3cret", now.Add(-10*time.Minute), body)
	if err := client.VerifySignature("s3cret", old, []byte(body), 0); err != nil {
		t.Fatalf("tolerance 0 skips the age check: %v", err)
	}
}
