package e2e_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/server"
)

// selfSigned writes a certificate for 127.0.0.1 and its key, and returns their
// paths and a pool that trusts the certificate.
func selfSigned(t *testing.T) (certPath, keyPath string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "taskforge test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certPath, keyPath = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyPath, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certPath, keyPath, pool
}

func TestServeOverTLS(t *testing.T) {
	t.Parallel()
	certPath, keyPath, pool := selfSigned(t)
	port := testenv.FreePort(t)
	cmd := exec.Command(taskforgeBinary(t), "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+testenv.NewDatabase(t), "REDIS_URL=redis://"+testenv.RedisAddr(t),
		"TASKFORGE_REDIS_PREFIX="+testenv.RedisPrefix(t), fmt.Sprintf("TASKFORGE_LISTEN=127.0.0.1:%d", port),
		"TASKFORGE_TLS_CERT="+certPath, "TASKFORGE_TLS_KEY="+keyPath, "TASKFORGE_LOG_LEVEL=warn")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	https := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	url := fmt.Sprintf("https://127.0.0.1:%d/readyz", port)
	testserver.Eventually(t, 30*time.Second, "HTTPS readyz", func() bool {
		resp, err := https.Get(url)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	plain := &http.Client{Timeout: 5 * time.Second}
	if resp, err := plain.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port)); err == nil {
		resp.Body.Close()
		if resp.StatusCode == 200 {
			t.Fatal("plain HTTP was answered 200 by a TLS listener")
		}
	}
}

func TestJanitorRunsInServe(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		c.Retention = 300 * time.Millisecond
		c.RetentionInterval = 100 * time.Millisecond
	}})
	s.CreateQueue("q", nil)
	// Another queue keeps done tasks forever, so that q's retention is the shorter
	// one: its expired history leaves in batches at the next sweep. (Were every
	// queue's the same, the task would leave with its whole day, once the day ends.)
	s.CreateQueue("keep", map[string]any{"retention": map[string]any{"done_ms": nil}})
	done := s.Enqueue("q", map[string]any{"payload": "finished"})
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{"q"}, 1, 2000)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": p[0].ID, "lease_token": p[0].LeaseToken})
	waiting := s.Enqueue("q", map[string]any{"payload": "waiting", "scheduled_at": "2099-01-01T00:00:00Z"})
	s.Signals.JanitorSweep.WaitUntil(t, "the janitor's sweep of the done task", func() bool {
		return s.Do("GET", "/queues/q/tasks/"+done.ID, nil).Status == 404
	})
	if got := s.Task("q", waiting.ID); got.Status != "pending" {
		t.Fatalf("the janitor touched an unfinished task: %s", got.Status)
	}
}
