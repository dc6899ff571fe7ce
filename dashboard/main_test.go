package dashboard_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/taskforge/taskforge/internal/testenv"
	"github.com/taskforge/taskforge/internal/testserver"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// Environment variables the browser tests read.
const (
	// envChromium names a Chromium (or Chrome) binary to use instead of the one on PATH.
	envChromium = "TASKFORGE_CHROMIUM"
	// envUpdateScreenshots, set to 1, makes the tests write the panel screenshots
	// into docs/screenshots instead of a temporary directory.
	envUpdateScreenshots = "TASKFORGE_UPDATE_SCREENSHOTS"
)

// chromiumPath finds the browser, or says why there is none.
func chromiumPath() (string, error) {
	if p := os.Getenv(envChromium); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			return "", fmt.Errorf("$%s: %w", envChromium, err)
		}
		return p, nil
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
	}
	return "", errors.New("no chromium on PATH (Debian: apt-get install -y chromium; or set " + envChromium + ")")
}

// startBrowser starts one headless Chromium for the whole test (its subtests open
// tabs in it) and stops it when the test ends. Without Chromium the test is
// skipped, unless it runs under CI, where that is a failure.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	path, err := chromiumPath()
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("browser tests skipped: %v", err)
		}
		t.Fatalf("browser tests need Chromium under CI: %v", err)
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	browserCtx, cancelBrowser := chromedp.NewContext(allocCtx)
	t.Cleanup(func() { cancelBrowser(); cancelAlloc() })
	if err := chromedp.Do(browserCtx); err != nil { // start it now: the first run owns the browser
		t.Fatalf("start chromium %s: %v", path, err)
	}
	return browserCtx
}

// tab is one browser tab on a test replica, recording what would betray a bug:
// JavaScript dialogs, uncaught exceptions and console or browser-log errors (a CSP
// or Trusted Types violation is one).
type tab struct {
	t   *testing.T
	ctx context.Context
	srv *testserver.Instance

	mu       sync.Mutex
	dialogs  []string
	problems []string
}

// openTab opens a tab of width×height on the dashboard of srv at fragment (e.g.
// "#/workers") and waits until the first snapshot has been rendered.
func openTab(t *testing.T, browser context.Context, srv *testserver.Instance, fragment string, width, height int64) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browser)
	t.Cleanup(cancel)
	tb := &tab{t: t, ctx: ctx, srv: srv}
	if err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			tb.mu.Lock()
			tb.dialogs = append(tb.dialogs, string(ev.Type)+": "+ev.Message)
			tb.mu.Unlock()
			go func() { // never block the page on it
				_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
			}()
		}
	}); err != nil {
		t.Fatalf("listen: %v", err)
	}
	console := chromedp.Console(ctx)
	go func() {
		for m, err := range console {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() || (m.Type == chromedp.ConsoleWarning && strings.Contains(m.Text, "Content Security Policy")) {
				tb.mu.Lock()
				tb.problems = append(tb.problems, fmt.Sprintf("%s (%s:%d)", m, m.URL, m.Line))
				tb.mu.Unlock()
			}
		}
	}()
	tb.do(chromedp.EmulateViewport(width, height), chromedp.Navigate(srv.URL+"/admin/"+fragment))
	tb.waitJS(`document.getElementById('live').dataset.status === 'live'`, "the first snapshot")
	return tb
}

// do runs actions, failing the test on error.
func (tb *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		tb.t.Fatalf("browser: %v (page problems: %v)", err, tb.pageProblems())
	}
}

// eval evaluates a JavaScript expression.
func eval[T any](tb *tab, expr string) T {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		tb.t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// waitJS waits until a JavaScript expression is truthy (checked every 25 ms; not
// on animation frames, which background tabs do not get).
func (tb *tab) waitJS(expr, what string) {
	tb.t.Helper()
	tb.waitJSFor(expr, what, 15*time.Second)
}

// waitJSFor is waitJS with another timeout.
func (tb *tab) waitJSFor(expr, what string, timeout time.Duration) {
	tb.t.Helper()
	ctx, cancel := context.WithTimeout(tb.ctx, timeout+5*time.Second)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingInterval(25*time.Millisecond), chromedp.WithPollingTimeout(timeout))); err != nil {
		tb.t.Fatalf("waiting for %s (%s): %v; page problems: %v", what, expr, err, tb.pageProblems())
	}
}

// click clicks the element a CSS selector finds, once it is visible.
func (tb *tab) click(selector string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(chromedp.CSS(selector)), chromedp.Click(chromedp.CSS(selector)))
}

// enter sets the value of the input a CSS selector finds and fires the input and
// change events a user's typing would. chromedp.SetValue fires neither, so a view
// that tracks unsaved edits would not see the change and a live update could
// overwrite it before the test submits.
func (tb *tab) enter(selector, value string) {
	tb.t.Helper()
	tb.do(chromedp.WaitVisible(chromedp.CSS(selector)))
	ok := eval[bool](tb, fmt.Sprintf(`(() => {
  const el = document.querySelector(%q);
  if (!el) return false;
  el.value = %q;
  el.dispatchEvent(new Event('input', { bubbles: true }));
  el.dispatchEvent(new Event('change', { bubbles: true }));
  return true;
})()`, selector, value))
	if !ok {
		tb.t.Fatalf("no element %s to enter %q into", selector, value)
	}
}

// text returns the text of the first element a CSS selector finds.
func (tb *tab) text(selector string) string {
	tb.t.Helper()
	return eval[string](tb, fmt.Sprintf(`(document.querySelector(%q) || {}).textContent || ''`, selector))
}

func (tb *tab) pageProblems() []string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return append([]string(nil), tb.problems...)
}

// checkClean fails the test if the page opened a dialog or reported an error,
// except errors that contain one of the expected strings.
func (tb *tab) checkClean(expected ...string) {
	tb.t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	if len(tb.dialogs) > 0 {
		tb.t.Errorf("the page opened dialogs: %q", tb.dialogs)
	}
	var problems []string
	for _, p := range tb.problems {
		if !slices.ContainsFunc(expected, func(e string) bool { return strings.Contains(p, e) }) {
			problems = append(problems, p)
		}
	}
	if len(problems) > 0 {
		tb.t.Errorf("the page reported errors: %q", problems)
	}
}

var screenshotDirOnce = sync.OnceValues(func() (string, bool) {
	if os.Getenv(envUpdateScreenshots) == "1" {
		return filepath.Join("..", "docs", "screenshots"), true
	}
	return filepath.Join(os.TempDir(), "taskforge-dashboard-screenshots"), false
})

// screenshot saves a full-page PNG. Documentation screenshots (doc) go to
// docs/screenshots when TASKFORGE_UPDATE_SCREENSHOTS=1; every other one, and all of
// them otherwise, go to a temporary directory.
func (tb *tab) screenshot(name string, doc bool) {
	tb.t.Helper()
	dir, update := screenshotDirOnce()
	if !doc || !update {
		dir = filepath.Join(os.TempDir(), "taskforge-dashboard-screenshots")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(tb.ctx, 20*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		tb.t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join(dir, name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		tb.t.Fatal(err)
	}
	tb.t.Logf("screenshot: %s", path)
}
