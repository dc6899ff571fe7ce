package e2e_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/taskforge/taskforge/internal/localpg"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/sealer"
	"github.com/taskforge/taskforge/server"
	"github.com/taskforge/taskforge/storage"
)

func newKey(id string) string {
	return id + "=" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(id[:1]), 32))
}

// TestPayloadsAndResultsAreEncryptedAtRest: a canary in payloads, results, progress
// and workers' error texts (a nack's error, a release's reason) shows up nowhere at rest
// (pg_dump, every Redis key, the logs) yet the API returns it, and rotating to a new
// key keeps every task, and every error text, readable.
func TestPayloadsAndResultsAreEncryptedAtRest(t *testing.T) {
	t.Parallel()
	const canary = "CANARY-7f3a9c-secret"
	k1, k2 := newKey("a1"), newKey("b2")
	var logs testserver.LogBuffer
	s := testserver.Start(t, testserver.Options{Log: &logs, Configure: func(c *server.Config) { c.EncryptionKeys = k1 }})
	s.CreateQueue("q", nil)
	ids := []string{}
	for i := 0; i < 5; i++ {
		ids = append(ids, s.Enqueue("q", map[string]any{"payload": map[string]any{"card": canary, "i": i}}).ID)
	}
	var out struct {
		Tasks []testserver.Task `json:"tasks"`
	}
	s.Must(201, "POST", "/queues/q/tasks/batch", map[string]any{"tasks": []any{map[string]any{"payload": canary}}}).JSON(t, &out)
	ids = append(ids, out.Tasks[0].ID)
	var p []testserver.Polled
	for len(p) == 0 {
		p = s.Poll("w", []string{"q"}, 1, 2000)
	}
	if !strings.Contains(string(p[0].Payload), canary) {
		t.Fatalf("the worker got no plain payload: %s", p[0].Payload)
	}
	s.Must(200, "POST", "/workers/ack", map[string]any{"worker_id": "w", "task_id": p[0].ID, "lease_token": p[0].LeaseToken,
		"result": map[string]any{"echo": canary}})
	if got := s.Task("q", p[0].ID); !strings.Contains(string(got.Result), canary) || !strings.Contains(string(got.Payload), canary) {
		t.Fatalf("the API does not return the plain payload and result: %s / %s", got.Payload, got.Result)
	}
	// A worker's error texts: a nack's error and a release's reason.
	pollOne := func() testserver.Polled {
		for {
			if p := s.Poll("w", []string{"q"}, 1, 2000); len(p) == 1 {
				return p[0]
			}
		}
	}
	nacked := pollOne()
	// Progress, reported with a heartbeat, is sealed too and stays after the nack.
	s.Must(200, "POST", "/workers/heartbeat", map[string]any{"worker_id": "w", "task_id": nacked.ID,
		"lease_token": nacked.LeaseToken, "progress": map[string]any{"at": canary}})
	s.Nack("w", nacked, "SMTP 550 for "+canary, map[string]any{"retry_after_ms": 3600000})
	progressHolds := func(in *testserver.Instance) bool {
		var got struct {
			Progress json.RawMessage `json:"progress"`
		}
		in.Must(200, "GET", "/queues/q/tasks/"+nacked.ID, nil).JSON(t, &got)
		return strings.Contains(string(got.Progress), canary)
	}
	if !progressHolds(s) {
		t.Fatal("the API does not return the plain progress")
	}
	released := pollOne()
	s.Release("w", released, "stopping: "+canary)
	withErrors := []string{nacked.ID, released.ID}
	// errorsHold reports whether the task's last error and first attempt's error,
	// as in answers, hold the canary.
	errorsHold := func(in *testserver.Instance, id string) bool {
		got := in.Task("q", id)
		return got.LastError != nil && strings.Contains(*got.LastError, canary) && len(got.AttemptHistory) > 0 &&
			got.AttemptHistory[0].Error != nil && strings.Contains(*got.AttemptHistory[0].Error, canary)
	}
	for _, id := range withErrors {
		if !errorsHold(s, id) {
			t.Fatalf("the API does not return task %s's plain error texts: %+v", id, s.Task("q", id))
		}
	}

	bin, err := localpg.FindBinaries()
	if err != nil {
		t.Fatal(err)
	}
	dump, err := exec.Command(filepath.Join(bin, "pg_dump"), "--data-only", s.Config.DatabaseURL).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if n := bytes.Count(dump, []byte(canary)); n != 0 || !bytes.Contains(dump, []byte("taskforge_sealed")) {
		t.Fatalf("pg_dump holds the canary %d times (sealed values present: %v)", n, bytes.Contains(dump, []byte("taskforge_sealed")))
	}
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), s.Config.RedisPrefix+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("redis keys: %v %v", keys, err)
	}
	for _, k := range keys {
		if v, _ := rdb.Dump(context.Background(), k).Result(); strings.Contains(v, canary) || strings.Contains(k, canary) {
			t.Fatalf("redis key %s holds the canary", k)
		}
	}
	if strings.Contains(logs.String(), canary) {
		t.Fatal("the logs hold the canary")
	}

	// Rotate: k2 first, k1 still known; then drop k1.
	pool, err := storage.Connect(context.Background(), s.Config.DatabaseURL, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	keys2, _ := sealer.ParseKeys(k2 + "," + k1)
	sl, err := sealer.New(keys2)
	if err != nil {
		t.Fatal(err)
	}
	store := storage.New(pool, storage.WithSealer(sl))
	total, after := 0, uuid.Nil
	for {
		n, last, err := store.Reseal(context.Background(), after, 2)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		if last == after {
			break
		}
		after = last
	}
	var stale int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM all_tasks t WHERE payload->>'taskforge_sealed' NOT LIKE 'v1.b2.%'
		OR (result IS NOT NULL AND result->>'taskforge_sealed' NOT LIKE 'v1.b2.%')
		OR (progress IS NOT NULL AND coalesce(progress->>'taskforge_sealed', '') NOT LIKE 'v1.b2.%')
		OR (coalesce(last_error, '') <> '' AND last_error NOT LIKE '{"taskforge_sealed":"v1.b2.%')
		OR EXISTS (SELECT 1 FROM all_attempts a WHERE a.task_id = t.id AND coalesce(a.error, '') <> ''
			AND a.error NOT LIKE '{"taskforge_sealed":"v1.b2.%')`).Scan(&stale); err != nil {
		t.Fatal(err)
	}
	if total != len(ids) || stale != 0 {
		t.Fatalf("rotation re-encrypted %d of %d tasks; %d still under the old key", total, len(ids), stale)
	}
	s.Stop()
	onlyNew := testserver.Start(t, testserver.Options{DatabaseURL: s.Config.DatabaseURL, Configure: func(c *server.Config) { c.EncryptionKeys = k2 }})
	for _, id := range ids {
		if got := onlyNew.Task("q", id); !strings.Contains(string(got.Payload), canary) {
			t.Fatalf("task %s unreadable after rotation: %s", id, got.Payload)
		}
	}
	for _, id := range withErrors {
		if !errorsHold(onlyNew, id) {
			t.Fatalf("task %s's error texts unreadable after rotation: %+v", id, onlyNew.Task("q", id))
		}
	}
	if !progressHolds(onlyNew) {
		t.Fatal("progress unreadable after rotation")
	}
}
