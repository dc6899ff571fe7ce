package dashboard_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	"github.com/chromedp/chromedp"

	"github.com/taskforge/taskforge/internal/testserver"
)

// testScreenshots seeds a replica with a realistic mix (a busy queue, a failing
// one, dead letters, a paused backlog, a stale worker), runs workers against it
// while the chart fills, and takes a full-page screenshot of every panel. With
// TASKFORGE_UPDATE_SCREENSHOTS=1 they replace docs/screenshots/*.png.
func testScreenshots(t *testing.T, e *env) {
	s := e.srv
	s.CreateQueue("emails", map[string]any{"rate_limit": 50, "rate_burst": 100})
	s.CreateQueue("webhooks.deliver", map[string]any{"max_retries": 5, "backoff_base_ms": 500, "backoff_max_ms": 30000})
	s.CreateQueue("billing.invoices", map[string]any{"max_retries": 0, "max_concurrency": 4})
	s.CreateQueue("thumbnails", map[string]any{"paused": true})
	s.CreateQueue("reports.nightly", nil)

	// A webhook delivery that failed twice, then went through.
	hook := s.Enqueue("webhooks.deliver", map[string]any{"payload": map[string]any{
		"event": "order.paid", "order_id": "ord_8KxQ2", "amount_cents": 4599, "currency": "EUR",
		"url": "https://hooks.shop.example/orders", "headers": map[string]any{"X-Signature": "t=1718000000,v1=5f1c…"}}})
	for i, w := range []string{"worker-eu-1", "worker-eu-2", "worker-eu-1"} {
		p := pollOne(t, s, w, "webhooks.deliver")
		if i < 2 {
			s.Nack(w, p, []string{"POST https://hooks.shop.example/orders: 503 Service Unavailable",
				"POST https://hooks.shop.example/orders: context deadline exceeded (Client.Timeout exceeded while awaiting headers)"}[i],
				map[string]any{"retry_after_ms": 0})
			continue
		}
		s.Do("POST", "/workers/ack", map[string]any{"worker_id": w, "task_id": p.ID, "lease_token": p.LeaseToken,
			"result": map[string]any{"status": 200, "latency_ms": 182}})
	}

	// Dead invoices; one of them already replayed once.
	var dead []testserver.Task
	for i, msg := range []string{
		"stripe: card_declined (insufficient_funds) for customer cus_Q1w2",
		"stripe: card_declined (expired_card) for customer cus_Z9y8",
		"pdf render: template \"invoice-v3\" missing field \"vat_id\"",
		"stripe: rate limited (429), gave up after 1 attempt",
	} {
		dead = append(dead, makeDead(t, s, "billing.invoices", map[string]any{
			"invoice_id": fmt.Sprintf("inv_%04d", 2041+i), "customer": fmt.Sprintf("cus_%d", 700+i), "total_cents": 1299 * (i + 1)},
			[]string{"worker-eu-2", "worker-us-7"}[i%2], msg))
	}
	s.Must(http.StatusCreated, "POST", "/queues/billing.invoices/dlq/"+dead[3].ID+"/replay", nil)

	// A paused backlog, and reports scheduled for tonight.
	batch := func(queue string, n int, extra map[string]any) {
		tasks := make([]map[string]any, n)
		for i := range tasks {
			tasks[i] = map[string]any{"payload": map[string]any{"n": i}}
			for k, v := range extra {
				tasks[i][k] = v
			}
		}
		s.Must(http.StatusCreated, "POST", "/queues/"+queue+"/tasks/batch", map[string]any{"tasks": tasks})
	}
	batch("thumbnails", 140, nil)
	batch("reports.nightly", 12, map[string]any{"scheduled_at": time.Now().Add(6 * time.Hour).UTC().Format(time.RFC3339)})

	// worker-us-7 takes an invoice and falls silent: stale, holding a task.
	s.Enqueue("billing.invoices", map[string]any{"payload": map[string]any{"invoice_id": "inv_2050"}})
	pollOne(t, s, "worker-us-7", "billing.invoices")

	page := e.open("#/overview")
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); workload(ctx, s.URL) }()
	t.Cleanup(func() { stop(); wg.Wait() })

	// A chart worth documenting takes 20 s of samples; a plain test run checks the
	// chart fills with 5.
	points := 5
	if _, update := screenshotDirOnce(); update {
		points = 20
	}
	page.waitJSFor(fmt.Sprintf(`Number(document.getElementById('chart').dataset.points) >= %d`, points), "the chart's samples", 40*time.Second)
	page.waitJS(`document.querySelectorAll('#attention .att-warn, #attention .att-bad').length >= 3`, "the attention list")
	page.screenshot("overview", true)

	page.do(emulateDark(true))
	page.screenshot("overview-dark", true)
	page.do(emulateDark(false))

	page.do(chromedp.EmulateViewport(viewWidth, 1280), navigateHash("#/tasks?queue=webhooks.deliver&limit=25&task="+hook.ID))
	page.waitJS(`document.querySelectorAll('#attempts li').length === 3 && document.querySelectorAll('#task-list tbody tr').length > 3`, "the inspector")
	page.do(chromedp.Evaluate[chromedp.Void](`document.activeElement.blur()`)) // no focus ring in the picture
	page.screenshot("tasks", true)
	page.do(chromedp.EmulateViewport(viewWidth, viewHeight))

	page.do(navigateHash("#/dlq?queue=billing.invoices"))
	page.waitJS(`document.querySelectorAll('#dlq-list tbody tr').length === 4`, "the dead letters")
	page.do(chromedp.Click(chromedp.CSS(`#dlq-list tbody tr:nth-child(2) input[type="checkbox"]`)),
		chromedp.Click(chromedp.CSS(`#dlq-list tbody tr:nth-child(3) input[type="checkbox"]`)))
	page.screenshot("dlq", true)

	page.do(navigateHash("#/workers"))
	page.waitJS(`document.querySelectorAll('#worker-list tbody tr.stale').length === 1 && document.querySelectorAll('#worker-list tbody tr').length === 3`, "the workers")
	page.screenshot("workers", true)

	page.do(navigateHash("#/settings?queue=emails"))
	page.waitJS(`document.getElementById('s-rate_limit')?.value === '50'`, "the settings of emails")
	page.screenshot("settings", true)

	narrow := openTab(t, e.browser, s, "#/overview", 1024, 720)
	narrow.waitJS(`document.querySelectorAll('#queues tbody tr').length === 5`, "the queues")
	narrow.screenshot("overview-1024", true)
	page.checkClean()
	narrow.checkClean()
}

func emulateDark(on bool) chromedp.Action[chromedp.Void] {
	value := "light"
	if on {
		value = "dark"
	}
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: value}}})
		return err
	})
}

// workload plays two busy workers until ctx ends: emails arrive in bursts and
// are acked; about a third of webhook deliveries fail and retry; worker-us-7 stays
// silent. It uses plain HTTP (not the test's helpers, which may only fail the
// test from its own goroutine) and ignores errors: the replica stops first.
func workload(ctx context.Context, base string) {
	post := func(path string, body any) []byte {
		b, _ := json.Marshal(body)
		req, err := http.NewRequestWithContext(ctx, "POST", base+path, bytes.NewReader(b))
		if err != nil {
			return nil
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(resp.Body)
		return buf.Bytes()
	}
	type polled struct {
		Tasks []struct {
			ID         string `json:"id"`
			LeaseToken string `json:"lease_token"`
		} `json:"tasks"`
	}
	work := func(worker, queue string, max int, fail float64, errText string) {
		var got polled
		_ = json.Unmarshal(post("/workers/poll", map[string]any{"worker_id": worker, "queues": []string{queue}, "max_tasks": max}), &got)
		for _, p := range got.Tasks {
			if rand.Float64() < fail {
				post("/workers/nack", map[string]any{"worker_id": worker, "task_id": p.ID, "lease_token": p.LeaseToken, "error": errText})
				continue
			}
			post("/workers/ack", map[string]any{"worker_id": worker, "task_id": p.ID, "lease_token": p.LeaseToken})
		}
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Emails come in waves; webhooks at a steady trickle.
		wave := 2 + int(6*(1+math.Sin(float64(i)/6)))
		tasks := make([]map[string]any, wave)
		for j := range tasks {
			tasks[j] = map[string]any{"payload": map[string]any{"to": fmt.Sprintf("user%d@example.com", i*10+j), "template": "receipt"}}
		}
		post("/queues/emails/tasks/batch", map[string]any{"tasks": tasks})
		if i%2 == 0 {
			post("/queues/webhooks.deliver/tasks", map[string]any{"payload": map[string]any{"event": "order.paid", "n": i}})
		}
		work("worker-eu-1", "emails", 6, 0, "")
		work("worker-eu-2", "emails", 4, 0, "")
		work("worker-eu-1", "webhooks.deliver", 2, 0.35, "POST https://hooks.shop.example/orders: 502 Bad Gateway")
	}
}
