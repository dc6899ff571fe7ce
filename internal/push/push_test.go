package push_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/taskforge/taskforge/client"
	"github.com/taskforge/taskforge/internal/push"
	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
	"github.com/taskforge/taskforge/internal/testsignal"
	"github.com/taskforge/taskforge/server"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// fast makes a test replica's pushers react quickly.
func fast(c *server.Config) {
	c.Push.RefreshInterval = 50 * time.Millisecond
	c.Push.WakeFallback = 100 * time.Millisecond
	c.Push.CancelCheckInterval = 50 * time.Millisecond
	c.Push.LeaseMargin = time.Second
}

func start(t *testing.T) *testserver.Instance {
	return testserver.Start(t, testserver.Options{Configure: fast})
}

// received is one request as a target saw it.
type received struct {
	at     time.Time
	header http.Header
	body   []byte
}

// target is an httptest server answering with handle, recording every request.
type target struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
	got  chan received // every request, buffered
}

func newTarget(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *target {
	tg := &target{got: make(chan received, 1000)}
	tg.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rec := received{at: time.Now(), header: r.Header.Clone(), body: body}
		tg.mu.Lock()
		tg.reqs = append(tg.reqs, rec)
		n := len(tg.reqs)
		tg.mu.Unlock()
		tg.got <- rec
		handle(w, r, n)
	}))
	t.Cleanup(tg.Close)
	return tg
}

func (tg *target) count() int {
	tg.mu.Lock()
	defer tg.mu.Unlock()
	return len(tg.reqs)
}

func (tg *target) next(t *testing.T) received {
	t.Helper()
	select {
	case r := <-tg.got:
		return r
	case <-time.After(15 * time.Second):
		t.Fatal("the target got no request")
		return received{}
	}
}

func pushQueue(s *testserver.Instance, name, url string, extra map[string]any) {
	settings := map[string]any{"push": map[string]any{"url": url}}
	for k, v := range extra {
		settings[k] = v
	}
	s.CreateQueue(name, settings)
}

func waitStatus(t *testing.T, s *testserver.Instance, queue, id, status string) testserver.Task {
	t.Helper()
	var got testserver.Task
	s.Signals.PushAnswer.WaitUntil(t, fmt.Sprintf("a push answer that leaves task %s %s", id, status), func() bool {
		got = s.Task(queue, id)
		return got.Status == status
	})
	return got
}

func TestPushSuccessStoresResultAndSendsHeaders(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"sent": true}`)
	})
	s.CreateQueue("hooks", map[string]any{"push": map[string]any{"url": tg.URL + "/hook?x=1",
		"headers": map[string]string{"Authorization": "Bearer abc", "x-extra": "1"}}})
	task := s.Enqueue("hooks", map[string]any{"payload": map[string]any{"to": "a@b.c"}})

	r := tg.next(t)
	var sent map[string]any
	if err := json.Unmarshal(r.body, &sent); err != nil || sent["to"] != "a@b.c" || len(sent) != 1 {
		t.Fatalf("body %s, want the payload", r.body)
	}
	for name, want := range map[string]string{"Content-Type": "application/json", "Taskforge-Task-Id": task.ID,
		"Taskforge-Queue": "hooks", "Taskforge-Attempt": "1", "Authorization": "Bearer abc", "X-Extra": "1"} {
		if got := r.header.Get(name); got != want {
			t.Errorf("header %s = %q, want %q", name, got, want)
		}
	}
	if at, err := time.Parse(time.RFC3339Nano, r.header.Get("Taskforge-Scheduled-At")); err != nil || !at.Equal(task.ScheduledAt) {
		t.Errorf("TaskForge-Scheduled-At %q, want %s (%v)", r.header.Get("Taskforge-Scheduled-At"), task.ScheduledAt, err)
	}
	if r.header.Get(push.SignatureHeader) != "" {
		t.Error("a queue without a secret sent a signature")
	}
	done := waitStatus(t, s, "hooks", task.ID, "done")
	if string(done.Result) != `{"sent": true}` && string(done.Result) != `{"sent":true}` {
		t.Fatalf("result %s, want the answer's JSON body", done.Result)
	}
	if len(done.AttemptHistory) != 1 || !strings.HasPrefix(done.AttemptHistory[0].WorkerID, "push:") ||
		done.AttemptHistory[0].Status != "succeeded" {
		t.Fatalf("attempts %+v, want one succeeded attempt by push:<replica>", done.AttemptHistory)
	}
}

func TestPushNonJSONAnswerKeepsNoResult(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) { _, _ = io.WriteString(w, "OK") })
	pushQueue(s, "plain", tg.URL, nil)
	task := s.Enqueue("plain", map[string]any{"payload": 1})
	if done := waitStatus(t, s, "plain", task.ID, "done"); len(done.Result) != 0 && string(done.Result) != "null" {
		t.Fatalf("result %s, want none for a body that is not JSON", done.Result)
	}
}

func TestPush503ThenOKRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "busy "+strings.Repeat("x", 2000))
			return
		}
		_, _ = io.WriteString(w, `"ok"`)
	})
	pushQueue(s, "flaky", tg.URL, map[string]any{"backoff_base_ms": 300, "backoff_max_ms": 1000})
	task := s.Enqueue("flaky", map[string]any{"payload": 1})
	done := waitStatus(t, s, "flaky", task.ID, "done")
	if len(done.AttemptHistory) != 2 {
		t.Fatalf("attempts %+v, want 2", done.AttemptHistory)
	}
	first, second := done.AttemptHistory[0], done.AttemptHistory[1]
	if first.Status != "failed" || first.Error == nil || !strings.HasPrefix(*first.Error, "HTTP 503: busy xxx") {
		t.Fatalf("first attempt %+v, want failed with HTTP 503: <body>", first)
	}
	if n := len(*first.Error) - len("HTTP 503: "); n != 1024 {
		t.Errorf("the error keeps %d bytes of the body, want 1024", n)
	}
	// The queue's backoff after attempt 1: base + rand(0, base) = 300..600 ms.
	if gap := second.StartedAt.Sub(*first.FinishedAt); gap < 300*time.Millisecond {
		t.Fatalf("retried %s after the 503, want at least the 300ms backoff", gap)
	}
	if string(done.Result) != `"ok"` || tg.count() != 2 {
		t.Fatalf("result %s after %d requests", done.Result, tg.count())
	}
	// The dashboard's latest answers of the queue, newest first.
	answers, err := s.Server.Store.RecentPushAnswers(context.Background(), []string{"flaky"}, 5)
	if err != nil || len(answers["flaky"]) != 2 || answers["flaky"][0].Answer != "ok" || answers["flaky"][1].Answer != "HTTP 503" {
		t.Fatalf("recent answers %+v (%v), want ok then HTTP 503", answers, err)
	}
}

func TestPushRetryAfterSetsTheDelay(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", "2")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	pushQueue(s, "limited", tg.URL, map[string]any{"backoff_base_ms": 10, "backoff_max_ms": 10})
	task := s.Enqueue("limited", map[string]any{"payload": 1})
	retry := waitStatus(t, s, "limited", task.ID, "retry")
	a := retry.AttemptHistory[0]
	if a.Error == nil || !strings.HasPrefix(*a.Error, "HTTP 429") {
		t.Fatalf("attempt %+v, want HTTP 429", a)
	}
	// Both times are on the database clock: the nack set scheduled_at = now + 2 s.
	if d := retry.ScheduledAt.Sub(*a.FinishedAt); d < 1990*time.Millisecond || d > 2100*time.Millisecond {
		t.Fatalf("retry due %s after the answer, want 2s (Retry-After: 2)", d)
	}
}

func TestRetryAfterDate(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	// The target answers with a date 3 s after the pusher's clock.
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		w.Header().Set("Retry-After", now.Add(3*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusServiceUnavailable)
	})
	s2 := testserver.Start(t, testserver.Options{Configure: func(c *server.Config) {
		fast(c)
		c.Push.Now = func() time.Time { return now }
	}})
	pushQueue(s2, "dated", tg.URL, nil)
	task := s2.Enqueue("dated", map[string]any{"payload": 1})
	retry := waitStatus(t, s2, "dated", task.ID, "retry")
	if d := retry.ScheduledAt.Sub(*retry.AttemptHistory[0].FinishedAt); d < 2990*time.Millisecond || d > 3100*time.Millisecond {
		t.Fatalf("retry due %s after the answer, want 3s (a Retry-After date)", d)
	}
}

func TestPush404IsDeadAtOnce(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Error(w, "no such hook", http.StatusNotFound)
	})
	pushQueue(s, "gone", tg.URL, map[string]any{"max_retries": 5})
	task := s.Enqueue("gone", map[string]any{"payload": 1})
	dead := waitStatus(t, s, "gone", task.ID, "dead")
	if dead.Attempts != 1 || dead.LastError == nil || *dead.LastError != "HTTP 404: no such hook\n" {
		t.Fatalf("dead task attempts %d, last_error %v", dead.Attempts, dead.LastError)
	}
}

func TestPushRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	s := start(t)
	var elsewhere atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		http.Redirect(w, r, other.URL, http.StatusTemporaryRedirect)
	})
	pushQueue(s, "moved", tg.URL, nil)
	task := s.Enqueue("moved", map[string]any{"payload": 1})
	dead := waitStatus(t, s, "moved", task.ID, "dead")
	if elsewhere.Load() != 0 || !strings.HasPrefix(*dead.LastError, "HTTP 307") {
		t.Fatalf("redirect followed %d times; last_error %q", elsewhere.Load(), *dead.LastError)
	}
}

func TestPushHangingTargetTimesOutAndRetries(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 1 {
			<-r.Context().Done() // hang until the pusher gives up
			return
		}
	})
	s.CreateQueue("slow", map[string]any{"backoff_base_ms": 10, "backoff_max_ms": 10,
		"push": map[string]any{"url": tg.URL, "timeout_ms": 300}})
	task := s.Enqueue("slow", map[string]any{"payload": 1})
	done := waitStatus(t, s, "slow", task.ID, "done")
	first := done.AttemptHistory[0]
	if len(done.AttemptHistory) != 2 || first.Error == nil || !strings.Contains(*first.Error, "timed out") {
		t.Fatalf("attempts %+v, want a timed-out attempt then a success", done.AttemptHistory)
	}
	if took := first.FinishedAt.Sub(first.StartedAt); took < 300*time.Millisecond || took > 3*time.Second {
		t.Fatalf("the hanging attempt lasted %s, want about timeout_ms (300ms)", took)
	}
}

func TestPushSignature(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	c, err := client.New(s.URL)
	if err != nil {
		t.Fatal(err)
	}
	q, err := c.CreateQueue(context.Background(), "signed", client.QueueSettings{Push: client.Set(&client.PushConfig{
		URL: tg.URL, Timeout: 5 * time.Second, Secret: client.Set("s3cret")})})
	if err != nil || q.Push == nil || q.Push.URL != tg.URL || q.Push.TimeoutMs != 5000 || !q.Push.SecretSet {
		t.Fatalf("client created %+v (%v), want the push target", q, err)
	}
	got := s.Must(http.StatusOK, "GET", "/queues/signed", nil)
	if strings.Contains(string(got.Body), "s3cret") || !strings.Contains(string(got.Body), `"secret_set":true`) {
		t.Fatalf("queue shows %s, want secret_set and never the secret", got.Body)
	}
	s.Enqueue("signed", map[string]any{"payload": map[string]any{"n": 1}})
	r := tg.next(t)
	header := r.header.Get(push.SignatureHeader)
	ts, mac, ok := strings.Cut(header, ",v1=")
	ts, okT := strings.CutPrefix(ts, "t=")
	if !ok || !okT {
		t.Fatalf("signature header %q, want t=<unix>,v1=<hex>", header)
	}
	if sec, err := strconv.ParseInt(ts, 10, 64); err != nil || time.Since(time.Unix(sec, 0)).Abs() > time.Minute {
		t.Fatalf("signature time %q is not now", ts)
	}
	sign := func(secret string) string {
		h := hmac.New(sha256.New, []byte(secret))
		h.Write([]byte(ts + "." + string(r.body)))
		return hex.EncodeToString(h.Sum(nil))
	}
	if !hmac.Equal([]byte(mac), []byte(sign("s3cret"))) {
		t.Fatal("the signature does not verify with the queue's secret")
	}
	if hmac.Equal([]byte(mac), []byte(sign("other"))) {
		t.Fatal("the signature verifies with another secret")
	}
	if err := client.VerifySignature("s3cret", header, r.body, time.Minute); err != nil {
		t.Fatalf("the SDK rejects a good signature: %v", err)
	}
	if err := client.VerifySignature("other", header, r.body, time.Minute); err == nil {
		t.Fatal("the SDK accepts a signature made with another secret")
	}
}

func TestPausedPushQueueSendsNothing(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	pushQueue(s, "held", tg.URL+"/held", map[string]any{"paused": true})
	pushQueue(s, "live", tg.URL+"/live", nil)
	held := s.Enqueue("held", map[string]any{"payload": 1})
	// Enqueued after the held task: every round of the pusher that takes it tries
	// the held queue too.
	live := s.Enqueue("live", map[string]any{"payload": 2})
	waitStatus(t, s, "live", live.ID, "done")
	live2 := s.Enqueue("live", map[string]any{"payload": 3})
	waitStatus(t, s, "live", live2.ID, "done")
	if n := tg.count(); n != 2 {
		t.Fatalf("target got %d requests while one queue was paused, want 2", n)
	}
	if st := s.Task("held", held.ID).Status; st == "executing" || st == "done" {
		t.Fatalf("paused queue's task is %s", st)
	}
	s.Must(http.StatusOK, "POST", "/queues/held/resume", nil)
	waitStatus(t, s, "held", held.ID, "done")
}

func TestPushRateLimitAcrossTwoReplicas(t *testing.T) {
	t.Parallel()
	a := start(t)
	b := testserver.Start(t, testserver.Options{DatabaseURL: a.Config.DatabaseURL, RedisPrefix: a.Config.RedisPrefix, Configure: fast})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	const rate, burst, total = 10.0, 5, 30
	pushQueue(a, "metered", tg.URL, map[string]any{"rate_limit": rate, "rate_burst": burst})
	tasks := make([]map[string]any, total)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": i}
	}
	b.Must(http.StatusCreated, "POST", "/queues/metered/tasks/batch", map[string]any{"tasks": tasks})
	testserver.Eventually(t, 20*time.Second, "every task pushed", func() bool { return tg.count() >= total }) // answered by either replica

	tg.mu.Lock()
	times := make([]time.Time, len(tg.reqs))
	for i, r := range tg.reqs {
		times[i] = r.at
	}
	tg.mu.Unlock()
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	// The requests are timed where they arrive: a token taken at t reaches the
	// target after the claim's commit and an HTTP hop, which a loaded machine
	// stretches by up to a few hundred ms, bunching some requests with later ones.
	// So no window may hold more than five requests beyond the bucket's figure (at
	// a load average of 10-14 one held four: 12 within 0.33 s against 8.3),
	// and the whole run, which the bucket holds to (total - burst) / rate = 2.5 s,
	// must take at least 2 s. Without a limit all 30 arrive within milliseconds;
	// with one replica ignoring it, in half the time.
	for i := range times {
		for j := i; j < len(times); j++ {
			window := times[j].Sub(times[i]).Seconds()
			if n := j - i + 1; float64(n) > burst+rate*window+5 {
				t.Fatalf("%d requests within %.3fs, above burst + rate·t = %.1f", n, window, burst+rate*window)
			}
		}
	}
	if span := times[len(times)-1].Sub(times[0]); span < 2*time.Second {
		t.Fatalf("%d requests within %s, where the bucket allows them no sooner than in 2.5 s", len(times), span)
	}
	if len(times) != total {
		t.Fatalf("%d requests for %d tasks", len(times), total)
	}
}

func TestPushMaxConcurrency(t *testing.T) {
	t.Parallel()
	s := start(t)
	var inFlight, peak atomic.Int32
	// The target holds every request until three are in flight at once, so the
	// pusher must reach its cap, and a fourth, if it sent one, would overlap them.
	full := make(chan struct{})
	var fullOnce sync.Once
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			p := peak.Load()
			if cur <= p || peak.CompareAndSwap(p, cur) {
				break
			}
		}
		if cur >= 3 {
			fullOnce.Do(func() { close(full) })
		}
		select {
		case <-full:
		case <-r.Context().Done():
		case <-time.After(testsignal.Timeout): // the cap was never reached: the peak check says so
		}
	})
	pushQueue(s, "capped", tg.URL, map[string]any{"max_concurrency": 3})
	tasks := make([]map[string]any, 24)
	for i := range tasks {
		tasks[i] = map[string]any{"payload": i}
	}
	s.Must(http.StatusCreated, "POST", "/queues/capped/tasks/batch", map[string]any{"tasks": tasks})
	s.Signals.PushAnswer.WaitUntil(t, "the answer of every task's request", func() bool { return tg.count() >= len(tasks) })
	if p := peak.Load(); p != 3 {
		t.Fatalf("peak of %d requests in flight at the target, want 3", p)
	}
}

func TestCancelAbortsPushRequest(t *testing.T) {
	t.Parallel()
	s := start(t)
	aborted := make(chan struct{})
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {
		<-r.Context().Done()
		close(aborted)
	})
	s.CreateQueue("cancellable", map[string]any{"push": map[string]any{"url": tg.URL, "timeout_ms": 60000}})
	task := s.Enqueue("cancellable", map[string]any{"payload": 1})
	tg.next(t)
	s.Must(http.StatusAccepted, "DELETE", "/queues/cancellable/tasks/"+task.ID, nil)
	select {
	case <-aborted:
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not aborted after the cancel")
	}
	got := waitStatus(t, s, "cancellable", task.ID, "cancelled")
	if a := got.AttemptHistory[0]; a.Status != "cancelled" {
		t.Fatalf("attempt %+v, want cancelled", a)
	}
}

func TestPushSpreadsOverQueues(t *testing.T) {
	t.Parallel()
	s := start(t)
	tg := newTarget(t, func(w http.ResponseWriter, r *http.Request, n int) {})
	var ids []string
	for i := range 3 {
		q := fmt.Sprintf("q%d", i)
		pushQueue(s, q, tg.URL, nil)
		ids = append(ids, s.Enqueue(q, map[string]any{"payload": i}).ID)
	}
	for i, id := range ids {
		waitStatus(t, s, fmt.Sprintf("q%d", i), id, "done")
	}
}
