package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/taskforge/taskforge/internal/testenv"
)

// signalTimeout bounds every wait on a signal of these tests; reaching it is a
// failure that names the event, not a measure of speed.
const signalTimeout = 20 * time.Second

func await(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(signalTimeout):
		t.Fatalf("no signal after %s: %s", signalTimeout, what)
	}
}

// recorder collects what the parts of a fake replica report, in order.
type recorder chan string

func (r recorder) note(event string) { r <- event }

// waitFor reads events until want.
func (r recorder) waitFor(t *testing.T, want string) {
	t.Helper()
	timeout := time.After(signalTimeout)
	for {
		select {
		case e := <-r:
			if e == want {
				return
			}
		case <-timeout:
			t.Fatalf("no %q after %s", want, signalTimeout)
		}
	}
}

// fakeLoop is a loop that reports when its context ends and when it returns;
// hold, when set, keeps it from returning until closed.
func fakeLoop(r recorder, name string, hold <-chan struct{}) loop {
	return loop{name, func(ctx context.Context) error {
		<-ctx.Done()
		r.note(name + " stopping")
		if hold != nil {
			<-hold
		}
		r.note(name + " stopped")
		return nil
	}}
}

func discardLog() *slog.Logger { return slog.New(slog.DiscardHandler) }

// TestServeStopsInOrder: nothing of a phase is told to stop before the phase
// before it has wholly ended, the HTTP drain first, then the loops that feed
// work, then the rest; and nothing is left running.
func TestServeStopsInOrder(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := make(recorder, 64)
	drained := make(chan struct{})
	phases := []phase{
		{name: "http drain", timeout: signalTimeout, loops: []loop{{"http", func(context.Context) error {
			<-drained // like http.Server.Serve, it returns when the drain is done
			r.note("http stopped")
			return nil
		}}}, stop: func(context.Context) error {
			r.note("http drain")
			close(drained)
			return nil
		}},
		{name: "feed", timeout: signalTimeout, loops: []loop{fakeLoop(r, "dispatcher", nil), fakeLoop(r, "scheduler", nil)}},
		{name: "rest", timeout: signalTimeout, loops: []loop{fakeLoop(r, "watchdog", nil), fakeLoop(r, "janitor", nil)},
			stop: func(context.Context) error { r.note("hub closed"); return nil }},
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runPhases(ctx, discardLog(), "test", phases) }()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("runPhases: %v", err)
		}
	case <-time.After(signalTimeout):
		t.Fatal("runPhases did not return after its context ended")
	}
	close(r)
	var events []string
	for e := range r {
		events = append(events, e)
	}
	phaseOf := map[string]int{"http": 0, "dispatcher": 1, "scheduler": 1, "watchdog": 2, "janitor": 2, "hub": 2}
	last := 0
	for _, e := range events {
		p := phaseOf[strings.Fields(e)[0]]
		if p < last {
			t.Fatalf("%q came after a later phase had begun stopping: %q", e, events)
		}
		last = p
	}
	for _, want := range []string{"http drain", "http stopped", "dispatcher stopped", "scheduler stopped",
		"watchdog stopped", "janitor stopped", "hub closed"} {
		if !slices.Contains(events, want) {
			t.Fatalf("no %q in %q", want, events)
		}
	}
}

// TestServeNamesAPhasePastItsDeadline: a phase still running at its deadline is
// named in the error (ErrStopDeadline, *StopDeadlineError), and the phases after
// it stop all the same.
func TestServeNamesAPhasePastItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		name        string
		stuckPhase  string
		wantRunning string
	}{
		{name: "a loop", stuckPhase: "feed", wantRunning: "stuck"},
		{name: "a drain", stuckPhase: "http drain", wantRunning: "its stop (context deadline exceeded)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
			r := make(recorder, 64)
			release := make(chan struct{})
			stuckLoop := fakeLoop(r, "stuck", release)
			var drainStop func(ctx context.Context) error
			if tc.stuckPhase == "http drain" {
				drainStop = func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }
				stuckLoop = fakeLoop(r, "stuck", nil)
			}
			const deadline = 50 * time.Millisecond
			phases := []phase{
				{name: "http drain", timeout: deadline, stop: drainStop},
				{name: "feed", timeout: deadline, loops: []loop{stuckLoop}},
				{name: "rest", timeout: signalTimeout, loops: []loop{fakeLoop(r, "watchdog", nil)}},
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			err := runPhases(ctx, discardLog(), "test", phases)
			close(release)
			var late *StopDeadlineError
			if !errors.Is(err, ErrStopDeadline) || !errors.As(err, &late) {
				t.Fatalf("runPhases = %v, want a *StopDeadlineError", err)
			}
			if late.Phase != tc.stuckPhase || late.Timeout != deadline || !slices.Equal(late.Running, []string{tc.wantRunning}) {
				t.Fatalf("StopDeadlineError = %+v, want phase %q running [%s]", late, tc.stuckPhase, tc.wantRunning)
			}
			if !strings.Contains(err.Error(), tc.stuckPhase) {
				t.Fatalf("error %q does not name the phase %q", err, tc.stuckPhase)
			}
			r.waitFor(t, "watchdog stopped") // the rest stopped although the phase before overran
			if tc.stuckPhase == "feed" {
				r.waitFor(t, "stuck stopped") // before goleak looks
			}
		})
	}
}

// TestServeStopsLoopFailure: a loop that fails stops the replica, and Serve
// returns its error with its name.
func TestServeStopsLoopFailure(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	r := make(recorder, 64)
	boom := errors.New("boom")
	phases := []phase{
		{name: "feed", timeout: signalTimeout, loops: []loop{{"dispatcher", func(context.Context) error { return boom }},
			fakeLoop(r, "scheduler", nil)}},
	}
	err := runPhases(context.Background(), discardLog(), "test", phases)
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "dispatcher: boom") || errors.Is(err, ErrStopDeadline) {
		t.Fatalf("runPhases = %v, want the dispatcher's error", err)
	}
}

// TestServeAnswersLongRequestsWhenStopping: a replica told to stop answers a
// long poll in flight at once (200, no tasks), ends a dashboard live stream, and
// stops cleanly within its deadlines, leaving no goroutine behind.
func TestServeAnswersLongRequestsWhenStopping(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := Config{DatabaseURL: testenv.NewDatabase(t), RedisURL: "redis://" + testenv.RedisAddr(t),
		RedisPrefix: testenv.RedisPrefix(t), ShutdownTimeout: 5 * time.Second}
	log := discardLog()
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	srv, err := New(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	arrived := make(chan string, 4)
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrived <- r.URL.Path
		inner.ServeHTTP(w, r)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()

	resp, err := client.Post(base+"/queues", "application/json", strings.NewReader(`{"name":"q"}`))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	<-arrived
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create queue: %d", resp.StatusCode)
	}

	// A dashboard live stream, reading until the server ends it.
	stream, err := client.Get(base + "/admin/events")
	if err != nil {
		t.Fatal(err)
	}
	<-arrived
	streamEnded := make(chan struct{})
	go func() {
		defer close(streamEnded)
		_, _ = io.Copy(io.Discard, bufio.NewReader(stream.Body))
		_ = stream.Body.Close()
	}()

	// A long poll that would wait 30 s for work that never comes.
	type answer struct {
		status int
		body   string
		err    error
	}
	polled := make(chan answer, 1)
	go func() {
		resp, err := client.Post(base+"/workers/poll", "application/json",
			strings.NewReader(`{"worker_id":"w","queues":["q"],"wait_ms":30000}`))
		if err != nil {
			polled <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		polled <- answer{status: resp.StatusCode, body: string(b), err: err}
	}()
	if p := <-arrived; p != "/workers/poll" {
		t.Fatalf("request %s arrived, want the poll", p)
	}

	stop()
	select {
	case a := <-polled:
		if a.err != nil || a.status != http.StatusOK || !strings.Contains(a.body, `"tasks":[]`) {
			t.Fatalf("long poll answered %d %q %v, want 200 with no tasks", a.status, a.body, a.err)
		}
	case <-time.After(signalTimeout):
		t.Fatal("the long poll was not answered when the replica stopped")
	}
	await(t, streamEnded, "the dashboard's live stream did not end")
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
	case <-time.After(signalTimeout):
		t.Fatal("Serve did not return")
	}
}
