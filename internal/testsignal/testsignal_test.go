package testsignal

import (
	"fmt"
	"sync"
	"testing"
	"time"
)

// fakeTB records a failure instead of ending the test, so that the failing paths
// can be checked.
type fakeTB struct {
	mu     sync.Mutex
	failed string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.failed = fmt.Sprintf(format, args...)
	f.mu.Unlock()
	panic(f) // stands in for runtime.Goexit; recovered by fails
}

// fails runs wait with a fakeTB and returns its failure message ("" for none).
func fails(wait func(TB)) (msg string) {
	tb := &fakeTB{}
	defer func() {
		if r := recover(); r != nil && r != tb {
			panic(r)
		}
		msg = tb.failed
	}()
	wait(tb)
	return ""
}

func TestUninitialisedSignalIsANoOp(t *testing.T) {
	var s Signal[int]
	s.Signal(1) // must not block or panic
	var nilSignal *Signal[int]
	nilSignal.Signal(1)
	if s.C() != nil {
		t.Fatal("an uninitialised signal has a channel")
	}
	if msg := fails(func(tb TB) { s.WaitOrTimeout(tb, "a pass") }); msg == "" {
		t.Fatal("waiting on an uninitialised signal did not fail")
	}
}

func TestWaitOrTimeoutReturnsValuesInOrder(t *testing.T) {
	var s Signal[int]
	s.Init()
	s.Signal(1)
	s.Signal(2)
	if v := s.WaitOrTimeout(t, "first"); v != 1 {
		t.Fatalf("got %d, want 1", v)
	}
	if v := s.WaitOrTimeout(t, "second"); v != 2 {
		t.Fatalf("got %d, want 2", v)
	}
}

func TestSignalDropsTheOldestWhenFull(t *testing.T) {
	var s Signal[int]
	s.Init()
	for i := range Capacity + 5 {
		s.Signal(i)
	}
	if v := s.WaitOrTimeout(t, "oldest kept"); v != 5 {
		t.Fatalf("oldest kept value is %d, want 5", v)
	}
	if n := s.Drain(); n != Capacity-1 {
		t.Fatalf("drained %d, want %d", n, Capacity-1)
	}
}

func TestWaitForSkipsValuesThatDoNotMatch(t *testing.T) {
	var s Signal[int]
	s.Init()
	go func() {
		for i := range 10 {
			s.Signal(i)
		}
	}()
	if v := s.WaitFor(t, "a value above 6", func(v int) bool { return v > 6 }); v != 7 {
		t.Fatalf("got %d, want 7", v)
	}
}

func TestWaitUntilChecksAfterEachSignal(t *testing.T) {
	var s Signal[struct{}]
	s.Init()
	var mu sync.Mutex
	n := 0
	go func() {
		for range 3 {
			mu.Lock()
			n++
			mu.Unlock()
			s.Signal(struct{}{})
		}
	}()
	s.WaitUntil(t, "three steps", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return n == 3
	})
}

func TestWaitNamesTheEventWhenItFails(t *testing.T) {
	var s Signal[int]
	s.Init()
	msg := fails(func(tb TB) { s.waitOrTimeout(tb, "the watchdog's sweep", time.Millisecond) })
	if want := "timed out after 1ms waiting for the watchdog's sweep"; msg != want {
		t.Fatalf("failure %q, want %q", msg, want)
	}
}
