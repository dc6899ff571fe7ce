package dashboard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// errHubClosed is returned to subscribers once the hub is closed.
var errHubClosed = errors.New("dashboard live feed stopped")

// hub computes one snapshot per interval while at least one browser listens, and
// fans the encoded event out to every subscriber. All subscribers share each
// computation and receive the same bytes.
//
// The hub's goroutine starts with the first subscriber and ends Linger after the
// last one left, or at stop. After close (or stop) the hub refuses new subscribers
// and has closed every subscriber's channel.
type hub struct {
	ctx      context.Context // ends at stop
	cancel   context.CancelFunc
	compute  func(context.Context) (*Snapshot, error)
	interval time.Duration
	linger   time.Duration
	keep     int // history points kept
	log      *slog.Logger

	mu        sync.Mutex
	subs      map[chan []byte]struct{}
	running   bool
	closed    bool
	idleSince time.Time
	latest    []byte        // the newest snapshot (or problem) event, for new subscribers
	history   []Point       // oldest first, at most keep
	stopped   chan struct{} // closed when the running goroutine ends
}

func newHub(compute func(context.Context) (*Snapshot, error), opts Options, log *slog.Logger) *hub {
	ctx, cancel := context.WithCancel(context.Background())
	return &hub{ctx: ctx, cancel: cancel, compute: compute, interval: opts.Interval, linger: opts.Linger,
		keep: max(2, int(opts.History/opts.Interval)), log: log, subs: make(map[chan []byte]struct{})}
}

// subscribe registers a listener and returns its channel (each message a complete
// SSE event) and the events to send first: the reconnect delay, the chart history
// and the newest snapshot. It starts the hub's goroutine when it is not running.
func (h *hub) subscribe() (chan []byte, [][]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed || h.ctx.Err() != nil {
		return nil, nil, errHubClosed
	}
	ch := make(chan []byte, 1)
	h.subs[ch] = struct{}{}
	initial := [][]byte{[]byte("retry: 2000\n\n"), event("history", append([]Point{}, h.history...))}
	if h.latest != nil {
		initial = append(initial, h.latest)
	}
	if !h.running {
		h.running = true
		h.stopped = make(chan struct{})
		go h.run(h.stopped)
	}
	return ch, initial, nil
}

// unsubscribe removes a listener. Its channel is left for the garbage collector.
func (h *hub) unsubscribe(ch chan []byte) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.subs, ch)
	if len(h.subs) == 0 {
		h.idleSince = time.Now()
	}
}

// run computes and broadcasts until ctx ends or the hub has been idle for linger.
func (h *hub) run(stopped chan struct{}) {
	defer close(stopped)
	ticker := time.NewTicker(h.interval)
	defer ticker.Stop()
	var r rater
	failing := false
	for {
		ctx, cancel := context.WithTimeout(h.ctx, 5*h.interval)
		snap, err := h.compute(ctx)
		cancel()
		var msg []byte
		var point Point
		switch {
		case h.ctx.Err() != nil:
			h.close()
			return
		case err != nil:
			if !failing {
				h.log.Warn("dashboard snapshot failed", "err", err)
			}
			failing = true
			msg = event("problem", map[string]string{"message": "live data unavailable: " + err.Error()})
		default:
			if failing {
				h.log.Info("dashboard snapshot recovered")
			}
			failing = false
			point = r.point(snap)
			snap.Point = point
			msg = event("snapshot", snap)
		}
		if !h.broadcast(msg, point, err == nil) {
			return
		}
		select {
		case <-h.ctx.Done():
			h.close()
			return
		case <-ticker.C:
		}
	}
}

// broadcast records msg as the newest event (and point in the history), offers it
// to every subscriber, and reports whether the hub should go on; it stops the hub
// (returning false) once it has been idle for linger.
func (h *hub) broadcast(msg []byte, point Point, ok bool) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.latest = msg
	if ok {
		if len(h.history) == h.keep {
			copy(h.history, h.history[1:])
			h.history = h.history[:h.keep-1]
		}
		h.history = append(h.history, point)
	}
	for ch := range h.subs {
		// Latest wins: a subscriber that has not taken the previous event loses it.
		select {
		case ch <- msg:
		default:
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- msg:
			default:
			}
		}
	}
	if len(h.subs) == 0 && time.Since(h.idleSince) >= h.linger {
		h.running = false
		// Rates and history restart with the next subscriber: a gap would lie.
		h.history, h.latest = nil, nil
		return false
	}
	return true
}

// close ends every stream and refuses new subscribers. The goroutine, if
// running, goes on until stop (or its linger).
func (h *hub) close() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.closed = true
	for ch := range h.subs {
		close(ch)
		delete(h.subs, ch)
	}
}

// stop closes the hub and ends its goroutine (cancelling a snapshot being
// computed), waiting for it.
func (h *hub) stop() {
	h.cancel()
	h.close()
	h.mu.Lock()
	stopped := h.stopped
	h.mu.Unlock()
	if stopped != nil {
		<-stopped
	}
}

// event encodes one server-sent event. JSON never holds a raw newline, so the data
// fits on one line.
func event(name string, v any) []byte {
	data, err := json.Marshal(v)
	if err != nil {
		data, _ = json.Marshal(map[string]string{"message": "encode " + name + ": " + err.Error()})
		name = "problem"
	}
	var b bytes.Buffer
	b.Grow(len(data) + len(name) + 16)
	b.WriteString("event: ")
	b.WriteString(name)
	b.WriteString("\ndata: ")
	b.Write(data)
	b.WriteString("\n\n")
	return b.Bytes()
}
