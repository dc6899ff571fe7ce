package dashboard_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
)

// Hostile strings in every place a user controls: payload keys and values, a
// result, an error, and a worker id. Queue names cannot hold markup (the API only
// accepts [A-Za-z0-9._-]).
const (
	evilWorker = `<img src=x onerror="window.__pwned='worker';alert('worker')"><script>window.__pwned='worker-script'</script>`
	evilError  = `<img src=x onerror="window.__pwned='error';alert('error')"> & <script>alert('error')</script>`
	evilHTML   = `<img src=x onerror="window.__pwned='payload';alert('payload')">`
	evilScript = `</pre><script>window.__pwned='payload-script';alert(1)</script>`
	evilKey    = `<b onmouseover=alert(1)>key</b>`
	evilSVG    = `<svg onload="window.__pwned='svg'"></svg>`
	evilResult = `<iframe src="javascript:alert('result')"></iframe>`
)

// Every user-supplied string renders as inert, escaped text on every panel: no
// dialog, no element injected, nothing the CSP had to block, and the exact text
// visible.
func testUserStringsRenderInert(t *testing.T, e *env) {
	s := e.srv
	payload := map[string]any{"html": evilHTML, "script": evilScript, evilKey: evilSVG}
	s.CreateQueue("xss", map[string]any{"max_retries": 0})
	dead := makeDead(t, s, "xss", payload, evilWorker, evilError)

	done := s.Enqueue("xss", map[string]any{"payload": payload})
	p := pollOne(t, s, evilWorker, "xss")
	if resp := s.Do("POST", "/workers/heartbeat", map[string]any{"worker_id": evilWorker, "task_id": p.ID,
		"lease_token": p.LeaseToken, "progress": map[string]any{"html": evilHTML}}); resp.Status != http.StatusOK {
		t.Fatalf("heartbeat with progress: %d %s", resp.Status, resp.Body)
	}
	if resp := s.Do("POST", "/workers/ack", map[string]any{"worker_id": evilWorker, "task_id": p.ID,
		"lease_token": p.LeaseToken, "result": map[string]any{"html": evilResult}}); resp.Status != http.StatusOK {
		t.Fatalf("ack: %d %s", resp.Status, resp.Body)
	}
	s.Enqueue("xss", map[string]any{"payload": payload})
	pollOne(t, s, evilWorker, "xss") // held: the worker panel lists it as current

	page := e.open("#/overview")
	views := []struct {
		fragment string
		ready    string
		// text is a selector whose textContent must be exactly want.
		text, want string
	}{
		{"#/overview", `document.querySelector('#queues tr[data-queue="xss"] td[data-col="executing"]')?.textContent === '1'`, "", ""},
		{"#/workers", `document.querySelector('#worker-list tbody th') !== null`, "#worker-list tbody th", evilWorker},
		{"#/dlq?queue=xss", `document.querySelector('#dlq-list tbody tr') !== null`, "#dlq-list tbody td.error-text", evilError},
		{"#/tasks?queue=xss&task=" + dead.ID, `document.querySelectorAll('#attempts li').length === 1`, "#attempts .tl-worker", evilWorker},
		{"#/tasks?queue=xss&task=" + dead.ID, `document.querySelectorAll('#attempts li').length === 1`, "#task-detail .error-pre", evilError},
		{"#/tasks?queue=xss&task=" + done.ID, `document.querySelectorAll('#attempts li[data-status="succeeded"]').length === 1`, "", ""},
	}
	for _, v := range views {
		page.do(navigateHash(v.fragment))
		page.waitJS(v.ready, v.fragment)
		if v.text != "" {
			if got := page.text(v.text); got != v.want {
				t.Errorf("%s: %s shows %q, want the literal %q", v.fragment, v.text, got, v.want)
			}
		}
		page.assertInert(v.fragment)
	}

	// The payload, the progress and the result, pretty-printed, are text too: their
	// markup is escaped in the DOM.
	page.do(navigateHash("#/tasks?queue=xss&task=" + done.ID))
	page.waitJS(`document.querySelectorAll('#task-detail pre.json').length === 3`, "payload, progress and result")
	jsonTexts := eval[[]string](page, `[...document.querySelectorAll('#task-detail pre.json')].map(p => p.textContent)`)
	jsonHTML := eval[[]string](page, `[...document.querySelectorAll('#task-detail pre.json')].map(p => p.innerHTML)`)
	for _, want := range []string{mustJSON(evilHTML), mustJSON(evilScript), mustJSON(evilKey), mustJSON(evilSVG)} {
		if !contains(jsonTexts[0], want) {
			t.Errorf("payload text lacks %s:\n%s", want, jsonTexts[0])
		}
	}
	if !contains(jsonTexts[1], mustJSON(evilHTML)) {
		t.Errorf("progress text lacks %s:\n%s", mustJSON(evilHTML), jsonTexts[1])
	}
	if !contains(jsonTexts[2], mustJSON(evilResult)) {
		t.Errorf("result text lacks %s:\n%s", mustJSON(evilResult), jsonTexts[2])
	}
	for i, html := range jsonHTML {
		if contains(html, "<img") || contains(html, "<script") || contains(html, "<iframe") || !contains(html, "&lt;") {
			t.Errorf("pre %d holds unescaped markup: %s", i, html)
		}
	}
	page.assertInert("payload, progress and result")

	// The CSP's Trusted Types make the browser refuse HTML strings outright (and
	// report it, which checkClean would catch anywhere else).
	if got := eval[string](page, `(() => { try { document.createElement('div').innerHTML = '<b>x</b>'; return 'allowed'; } catch (e) { return e.name; } })()`); got != "TypeError" {
		t.Errorf("assigning a string to innerHTML: %s, want a TypeError from Trusted Types", got)
	}
	page.screenshot("test-xss", false)
	page.checkClean("requires 'TrustedHTML' assignment") // the deliberate try above, and only it
}

// navigateHash moves the single-page app to another panel without a reload.
func navigateHash(fragment string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`location.hash = %q`, fragment))
}

// assertInert fails unless nothing injected ran or exists: no flag set by an
// injected handler, no element of a kind the dashboard never creates, and only
// the dashboard's own module script.
func (tb *tab) assertInert(where string) {
	tb.t.Helper()
	if pwned := eval[string](tb, `String(window.__pwned ?? '')`); pwned != "" {
		tb.t.Errorf("%s: injected code ran (%s)", where, pwned)
	}
	if n := eval[int](tb, `document.querySelectorAll('img, svg, iframe, object, embed, b, script:not([src])').length`); n != 0 {
		tb.t.Errorf("%s: %d injected elements: %s", where, n, eval[string](tb, `[...document.querySelectorAll('img, svg, iframe, object, embed, b, script:not([src])')].map(e => e.outerHTML).join(' ')`))
	}
	if n := eval[int](tb, `document.scripts.length`); n != 1 {
		tb.t.Errorf("%s: %d scripts in the page, want 1", where, n)
	}
	tb.mu.Lock()
	dialogs := len(tb.dialogs)
	tb.mu.Unlock()
	if dialogs != 0 {
		tb.t.Errorf("%s: a dialog opened", where)
	}
}

func mustJSON(s string) string {
	b, err := json.Marshal(s)
	if err != nil {
		panic(err)
	}
	// The page pretty-prints with JSON.stringify, which leaves <, > and & as they are.
	return strings.NewReplacer(`\u003c`, "<", `\u003e`, ">", `\u0026`, "&").Replace(string(b))
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
