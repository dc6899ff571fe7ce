package dashboard_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/taskforge/taskforge/dashboard"
	"github.com/taskforge/taskforge/internal/testserver"
)

// Every /admin response carries the strict CSP; the page and every asset it
// references are served with the right types; the page has no inline script or
// style, and no reference to another origin.
func TestPageAndAssetsAreServedUnderStrictCSP(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})

	if resp := s.Do("GET", "/admin", nil); resp.Status != http.StatusOK { // the client follows the redirect
		t.Fatalf("GET /admin: %d", resp.Status)
	}
	page := s.Must(http.StatusOK, "GET", "/admin/", nil)
	checkHeaders(t, "/admin/", page.Header, "text/html")
	html := string(page.Body)
	for _, m := range regexp.MustCompile(`(?s)<script([^>]*)>(.*?)</script>`).FindAllStringSubmatch(html, -1) {
		if !strings.Contains(m[1], `src="/admin/`) || strings.TrimSpace(m[2]) != "" {
			t.Errorf("the page has an inline script: %s", m[0])
		}
	}
	if regexp.MustCompile(`(?i)\son[a-z]+\s*=`).MatchString(html) {
		t.Error("the page has an inline event handler")
	}
	for _, bad := range []string{"style=", "<style", "javascript:", "http:", "https:"} {
		if strings.Contains(html, bad) {
			t.Errorf("the page contains %q", bad)
		}
	}

	refs := regexp.MustCompile(`(?:src|href)="(/admin/[^"]+)"`).FindAllStringSubmatch(html, -1)
	if len(refs) < 4 {
		t.Fatalf("found only %d asset references", len(refs))
	}
	want := map[string]string{".js": "text/javascript", ".css": "text/css", ".svg": "image/svg+xml"}
	for _, ref := range refs {
		resp := s.Must(http.StatusOK, "GET", ref[1], nil)
		checkHeaders(t, ref[1], resp.Header, want[filepath.Ext(ref[1])])
	}
	// Every module the entry point imports, transitively, is served as JavaScript.
	seen := map[string]bool{}
	var walk func(path string)
	walk = func(path string) {
		if seen[path] {
			return
		}
		seen[path] = true
		resp := s.Must(http.StatusOK, "GET", path, nil)
		checkHeaders(t, path, resp.Header, "text/javascript")
		for _, m := range regexp.MustCompile(`(?m)^import .* from '([^']+)';`).FindAllStringSubmatch(string(resp.Body), -1) {
			walk(resolve(path, m[1]))
		}
	}
	walk("/admin/assets/js/main.js")
	if len(seen) < 10 {
		t.Errorf("walked only %d modules", len(seen))
	}

	// Revalidation answers 304.
	etag := page.Header.Get("ETag")
	if resp := testserver.Do(t, s.URL, "GET", "/admin/", nil, http.Header{"If-None-Match": {etag}}); etag == "" || resp.Status != http.StatusNotModified {
		t.Errorf("revalidation with ETag %q: %d", etag, resp.Status)
	}
	if resp := s.Do("GET", "/admin/assets/nope.js", nil); resp.Status != http.StatusNotFound || resp.ErrorCode(t) != "not_found" {
		t.Errorf("missing asset: %d %s", resp.Status, resp.Body)
	}
	if resp := s.Do("GET", "/admin/assets/../../go.mod", nil); resp.Status == http.StatusOK {
		t.Errorf("path traversal served: %s", resp.Body)
	}
}

func checkHeaders(t *testing.T, path string, h http.Header, contentType string) {
	t.Helper()
	if got := h.Get("Content-Security-Policy"); got != dashboard.CSP {
		t.Errorf("%s: CSP %q", path, got)
	}
	for _, directive := range []string{"default-src 'self'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'", "require-trusted-types-for 'script'"} {
		if !strings.Contains(h.Get("Content-Security-Policy"), directive) {
			t.Errorf("%s: CSP lacks %s", path, directive)
		}
	}
	if strings.Contains(h.Get("Content-Security-Policy"), "unsafe") {
		t.Errorf("%s: CSP allows something unsafe", path)
	}
	if h.Get("X-Content-Type-Options") != "nosniff" || h.Get("X-Frame-Options") != "DENY" {
		t.Errorf("%s: missing nosniff or frame denial: %v", path, h)
	}
	if !strings.HasPrefix(h.Get("Content-Type"), contentType) {
		t.Errorf("%s: Content-Type %q, want %s", path, h.Get("Content-Type"), contentType)
	}
}

func resolve(from, rel string) string {
	return filepath.Clean(filepath.Join(filepath.Dir(from), rel))
}

// The live feed sends the reconnect delay and the chart history first, then a
// snapshot about every second with the queues, their stats and the workers, and
// ends when the replica stops.
func TestEventStream(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("alpha", map[string]any{"rate_limit": 5})
	s.Enqueue("alpha", map[string]any{"payload": 1})
	s.Poll("worker-1", []string{"alpha"}, 1, 5000)

	resp, err := http.Get(s.URL + "/admin/events")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("Content-Type %q", ct)
	}
	events := readEvents(t, resp, 3)
	if events[0].name != "history" {
		t.Fatalf("first event %q, want history", events[0].name)
	}
	var snaps []dashboard.Snapshot
	for _, e := range events[1:] {
		if e.name != "snapshot" {
			t.Fatalf("event %q: %s", e.name, e.data)
		}
		var snap dashboard.Snapshot
		if err := json.Unmarshal([]byte(e.data), &snap); err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, snap)
		t.Logf("snapshot: %d bytes, computed in %.1f ms", len(e.data), snap.ComputeMs)
	}
	last := snaps[len(snaps)-1]
	if gap := last.At.Sub(snaps[0].At); gap < 500*time.Millisecond || gap > 3*time.Second {
		t.Errorf("snapshots %s apart, want about 1s", gap)
	}
	if len(last.Queues) != 1 || last.Queues[0].Name != "alpha" || last.Queues[0].Depth["executing"] != 1 ||
		last.Queues[0].RateLimit == nil || *last.Queues[0].RateLimit != 5 {
		t.Errorf("queues: %+v", last.Queues)
	}
	if len(last.Workers) != 1 || last.Workers[0].ID != "worker-1" || len(last.Workers[0].CurrentTasks) != 1 {
		t.Errorf("workers: %+v", last.Workers)
	}
	if _, ok := last.Point.Queues["alpha"]; !ok {
		t.Errorf("chart point lacks alpha: %+v", last.Point)
	}

	// The stream ends when the replica stops, so that a shutdown is not held up.
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 4096)
		for {
			if _, err := resp.Body.Read(buf); err != nil {
				return
			}
		}
	}()
	start := time.Now()
	s.Stop()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the event stream outlived the replica")
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("stopping with an open dashboard took %s", took)
	}
}

type sse struct{ name, data string }

// readEvents reads n events (comments and retry lines skipped).
func readEvents(t *testing.T, resp *http.Response, n int) []sse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out := make(chan []sse, 1)
	go func() {
		var events []sse
		var cur sse
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				cur.name = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				cur.data = strings.TrimPrefix(line, "data: ")
			case line == "" && cur.name != "":
				events = append(events, cur)
				cur = sse{}
				if len(events) == n {
					out <- events
					return
				}
			}
		}
		out <- events
	}()
	select {
	case events := <-out:
		if len(events) < n {
			t.Fatalf("stream ended after %d events", len(events))
		}
		return events
	case <-ctx.Done():
		t.Fatalf("no %d events within 10s", n)
		return nil
	}
}

// The dead-letter listing filters by time of death and pages with a cursor.
func TestDeadLetterTimeFilter(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, testserver.Options{})
	s.CreateQueue("q", map[string]any{"max_retries": 0})
	var ids []string
	var died []time.Time
	for i := range 4 {
		task := s.Enqueue("q", map[string]any{"payload": i})
		p := s.Poll("w", []string{"q"}, 1, 5000)
		if len(p) != 1 || p[0].ID != task.ID {
			t.Fatalf("poll: %+v", p)
		}
		if r := s.Nack("w", p[0], "boom", map[string]any{"retryable": false}); r.Status != http.StatusOK {
			t.Fatalf("nack: %d %s", r.Status, r.Body)
		}
		ids = append(ids, task.ID)
		died = append(died, *s.Task("q", task.ID).FinishedAt)
		// Distinct death times, which the filter needs: each nack's transaction
		// starts after the previous one's answer, and PostgreSQL's clock counts
		// microseconds.
		if i > 0 && !died[i].After(died[i-1]) {
			t.Fatalf("task %d died at %s, not after task %d (%s)", i, died[i], i-1, died[i-1])
		}
	}
	list := func(query string) ([]string, string) {
		var out struct {
			Tasks []struct {
				ID     string    `json:"id"`
				DiedAt time.Time `json:"died_at"`
			} `json:"tasks"`
			NextCursor *string `json:"next_cursor"`
		}
		s.Must(http.StatusOK, "GET", "/admin/api/queues/q/dlq?"+query, nil).JSON(t, &out)
		var got []string
		for _, task := range out.Tasks {
			got = append(got, task.ID)
		}
		next := ""
		if out.NextCursor != nil {
			next = *out.NextCursor
		}
		return got, next
	}
	eq := func(what string, got, want []string) {
		t.Helper()
		if strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("%s: got %v, want %v", what, got, want)
		}
	}
	ts := func(tm time.Time) string { return tm.UTC().Format(time.RFC3339Nano) }

	all, next := list("")
	eq("all, newest first", all, []string{ids[3], ids[2], ids[1], ids[0]})
	if next != "" {
		t.Errorf("one page has a next cursor")
	}
	got, _ := list("died_after=" + ts(died[1]) + "&died_before=" + ts(died[2]))
	eq("died in [1, 2]", got, []string{ids[2], ids[1]})
	got, _ = list("died_before=" + ts(died[1]))
	eq("died up to 1", got, []string{ids[1], ids[0]})

	page1, cursor := list("limit=3&died_after=" + ts(died[1]))
	eq("page 1", page1, []string{ids[3], ids[2], ids[1]})
	if cursor != "" {
		t.Errorf("page 1 ends at the filter but has a cursor")
	}
	page1, cursor = list("limit=2")
	page2, last := list("limit=2&cursor=" + cursor)
	eq("pages", append(page1, page2...), []string{ids[3], ids[2], ids[1], ids[0]})
	if cursor == "" || last != "" {
		t.Errorf("cursors %q, %q", cursor, last)
	}

	for _, bad := range []string{"limit=0", "limit=501", "died_after=yesterday", "cursor=nope"} {
		if r := s.Do("GET", "/admin/api/queues/q/dlq?"+bad, nil); r.Status != http.StatusBadRequest || r.ErrorCode(t) != "invalid_request" {
			t.Errorf("%s: %d %s", bad, r.Status, r.Body)
		}
	}
	if r := s.Do("GET", "/admin/api/queues/nope/dlq", nil); r.Status != http.StatusNotFound || r.ErrorCode(t) != "queue_not_found" {
		t.Errorf("unknown queue: %d %s", r.Status, r.Body)
	}
}

// The guard refuses state-changing requests that a browser marks as cross-site
// and lets same-origin and non-browser ones through.
// The vendored uPlot files are the published ones, unchanged (their SHA-256 are
// recorded in static/vendor/uplot/README.md).
func TestVendoredUPlotIsUnchanged(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("static", "vendor", "uplot")
	readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	sums := regexp.MustCompile(`(?m)^([0-9a-f]{64})  (\S+)$`).FindAllStringSubmatch(string(readme), -1)
	if len(sums) != 3 {
		t.Fatalf("README.md lists %d checksums, want 3", len(sums))
	}
	for _, s := range sums {
		b, err := fs.ReadFile(os.DirFS(dir), s[2])
		if err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(b)
		if got := hex.EncodeToString(sum[:]); got != s[1] {
			t.Errorf("%s: sha256 %s, README says %s", s[2], got, s[1])
		}
	}
}
