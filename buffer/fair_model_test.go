package buffer_test

import (
	"context"
	"fmt"
	"math"
	"sort"
	"testing"
	"time"

	"github.com/google/uuid"
	"pgregory.net/rapid"

	"github.com/taskforge/taskforge/buffer"
	"github.com/taskforge/taskforge/ratelimit"
	"github.com/taskforge/taskforge/storage"
)

// The model of DESIGN §11 the fair pop is checked against: plain Go state of what
// PostgreSQL and the workers know (buffered tasks per group, executing tasks, the
// settings) and of the token buckets, with the guarantees as predicates over it. It
// does not copy the script's turn structures: it says what any correct pop may do.

// eps is the margin under which a bucket's tokens are too close to 1 for the model to
// say whether a token is there (the script and the model round alike, but a test
// should not hang on the last bit).
const eps = 1e-6

type mTask struct {
	id    uuid.UUID
	score float64
}

type mBucket struct {
	tokens float64
	ts     int64 // µs; 0 = never charged (full)
}

// refill is the bucket at now, as the scripts compute it.
func (b mBucket) refill(nowUs int64, rate float64, burst int) float64 {
	if b.ts == 0 {
		return float64(burst)
	}
	return math.Min(float64(burst), b.tokens+float64(max(0, nowUs-b.ts))*rate/1000000)
}

type mGroup struct {
	buf       []mTask            // by score, then id text (Redis's order)
	executing map[uuid.UUID]bool // id -> its slot was lost (a release Redis never saw)
	bucket    mBucket
	over      buffer.GroupSettings
	epoch     int     // bumps when the group's effective rate changes
	starts    []start // pops, for the rate windows
}

type start struct {
	us    int64
	epoch int
	rate  float64
	burst int
}

type model struct {
	groups   map[string]*mGroup
	defaults buffer.GroupLimits
	queue    ratelimit.Limits
	qbucket  mBucket
	synced   bool
	lastCfg  string
	lastDcap int
	nowUs    int64
}

func (m *model) group(g string) *mGroup {
	mg := m.groups[g]
	if mg == nil {
		mg = &mGroup{executing: map[uuid.UUID]bool{}}
		m.groups[g] = mg
	}
	return mg
}

// eff returns a group's effective weight, cap, rate and burst.
func (m *model) eff(g string) (w, capacity int, rate float64, burst int) {
	o := m.group(g).over
	w, capacity, rate, burst = 1, m.defaults.MaxConcurrency, m.defaults.Rate, m.defaults.Burst
	if o.Weight != nil {
		w = *o.Weight
	}
	if o.MaxConcurrency != nil {
		capacity = *o.MaxConcurrency
	}
	if o.Rate != nil {
		rate = *o.Rate
	}
	if o.Burst != nil {
		burst = *o.Burst
	}
	if rate > 0 && burst < 1 {
		burst = max(1, int(math.Ceil(rate)))
	}
	return w, capacity, rate, burst
}

func (m *model) levelWeight() float64 { return float64(buffer.LevelWeightMs(m.queue.AgingMs)) }

func (m *model) level(score float64) float64 { return math.Floor(score / m.levelWeight()) }

// eligibility of a group with buffered work: 1 surely may pop, 0 surely may not, -1
// too close to call (its tokens are within eps of 1).
func (m *model) eligible(g string) int {
	mg := m.group(g)
	if len(mg.buf) == 0 {
		return 0
	}
	_, capacity, rate, burst := m.eff(g)
	if capacity > 0 && len(mg.executing) >= capacity {
		return 0
	}
	if rate > 0 {
		tok := mg.bucket.refill(m.nowUs, rate, burst)
		if tok < 1-eps {
			return 0
		}
		if tok < 1+eps {
			return -1
		}
	}
	return 1
}

func (m *model) anyCap() bool {
	if m.queue.MaxConcurrency > 0 || m.defaults.MaxConcurrency > 0 {
		return true
	}
	for _, mg := range m.groups {
		if mg.over.MaxConcurrency != nil {
			return true
		}
	}
	return false
}

func (m *model) queueExecuting() int {
	n := 0
	for _, mg := range m.groups {
		n += len(mg.executing)
	}
	return n
}

func (m *model) buffered() int {
	n := 0
	for _, mg := range m.groups {
		n += len(mg.buf)
	}
	return n
}

func (m *model) cfg() string {
	return fmt.Sprint(m.defaults.MaxConcurrency, m.defaults.Rate, m.defaults.Burst, m.levelWeight())
}

// fairRun is one property run: a queue on b, its model, and the clock both share.
type fairRun struct {
	t     *rapid.T
	b     *buffer.Buffer
	queue string
	m     *model
}

var groupNames = []string{"", "a", "b", "c", "tenant:42@x.y-z"}

func (r *fairRun) add() {
	g := rapid.SampledFrom(groupNames).Draw(r.t, "group")
	prio := rapid.IntRange(1, 3).Draw(r.t, "priority")
	n := rapid.IntRange(1, 5).Draw(r.t, "n")
	tasks := make([]buffer.GroupedTask, n)
	mg := r.m.group(g)
	for i := range tasks {
		at := time.UnixMicro(r.m.nowUs).Add(-time.Duration(rapid.IntRange(0, 5000).Draw(r.t, "age_ms")) * time.Millisecond)
		tasks[i] = buffer.GroupedTask{Group: g, Buffered: storage.Buffered{ID: uuid.New(), Priority: prio, ScheduledAt: at}}
		mg.buf = append(mg.buf, mTask{id: tasks[i].ID, score: buffer.Score(prio, at, int64(r.m.levelWeight()))})
	}
	sort.Slice(mg.buf, func(i, j int) bool {
		if mg.buf[i].score != mg.buf[j].score {
			return mg.buf[i].score < mg.buf[j].score
		}
		return mg.buf[i].id.String() < mg.buf[j].id.String()
	})
	if err := r.b.AddGrouped(context.Background(), r.queue, tasks, int64(r.m.levelWeight())); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fairRun) pop() {
	m := r.m
	want := rapid.IntRange(1, 8).Draw(r.t, "want")
	got, err := r.b.FairPop(context.Background(), r.queue, want, m.queue, m.defaults)
	if err != nil {
		r.t.Fatal(err)
	}
	if got.RedisTimeUs != m.nowUs {
		r.t.Fatalf("script time %d, test clock %d", got.RedisTimeUs, m.nowUs)
	}
	if m.queue.Paused {
		if !got.Paused || len(got.Entries) > 0 {
			r.t.Fatalf("paused queue: %+v", got)
		}
		return
	}
	if cfg := m.cfg(); cfg != m.lastCfg {
		if m.lastCfg != "" && m.defaults.MaxConcurrency > 0 && m.lastDcap == 0 {
			m.synced = false
		}
		m.lastCfg, m.lastDcap = cfg, m.defaults.MaxConcurrency
	}
	if wantSync := m.anyCap() && !m.synced; got.NeedSync != wantSync {
		r.t.Fatalf("NeedSync %v, model says %v", got.NeedSync, wantSync)
	}
	if got.NeedSync {
		r.reconcile()
		return
	}
	qcap := m.queue.MaxConcurrency
	if wantCap := qcap > 0 && m.queueExecuting() >= qcap; got.AtCap != wantCap {
		r.t.Fatalf("AtCap %v, model says %v (%d executing, cap %d)", got.AtCap, wantCap, m.queueExecuting(), qcap)
	}
	if len(got.Entries) > want {
		r.t.Fatalf("popped %d of %d", len(got.Entries), want)
	}
	qtokens := 0.0
	if m.queue.Rate > 0 {
		qtokens = m.qbucket.refill(m.nowUs, m.queue.Rate, m.queue.Burst)
	}
	for i, e := range got.Entries {
		mg := m.group(e.Group)
		// Within a group, buffer order; and the pop may take it at all.
		if len(mg.buf) == 0 || mg.buf[0].id != e.ID {
			r.t.Fatalf("entry %d: %s of group %q is not its group's head", i, e.ID, e.Group)
		}
		if el := m.eligible(e.Group); el == 0 {
			_, c, rate, burst := m.eff(e.Group)
			r.t.Fatalf("entry %d: group %q popped while it may not (guarantees 1, 2): %d executing, cap %d, tokens %.6f (rate %v burst %d)",
				i, e.Group, len(mg.executing), c, mg.bucket.refill(m.nowUs, rate, burst), rate, burst)
		}
		if qcap > 0 && m.queueExecuting() >= qcap {
			r.t.Fatalf("entry %d: queue cap %d exceeded", i, qcap)
		}
		if m.queue.Rate > 0 && qtokens < 1-eps {
			r.t.Fatalf("entry %d: queue out of tokens (%.6f)", i, qtokens)
		}
		// Guarantee 5: nothing surely poppable waits at a better level.
		lvl := m.level(e.Score)
		for g, og := range m.groups {
			if g != e.Group && m.eligible(g) == 1 && m.level(og.buf[0].score) < lvl {
				r.t.Fatalf("entry %d: group %q popped at level %v while group %q could go at level %v", i, e.Group, lvl, g, m.level(og.buf[0].score))
			}
		}
		mg.buf = mg.buf[1:]
		mg.executing[e.ID] = false
		if _, _, rate, burst := m.eff(e.Group); rate > 0 {
			mg.bucket = mBucket{tokens: mg.bucket.refill(m.nowUs, rate, burst) - 1, ts: m.nowUs}
			mg.starts = append(mg.starts, start{us: m.nowUs, epoch: mg.epoch, rate: rate, burst: burst})
		}
		qtokens--
	}
	if m.queue.Rate > 0 {
		m.qbucket = mBucket{tokens: qtokens, ts: m.nowUs}
	}
	if got.Remaining != m.buffered() {
		r.t.Fatalf("remaining %d, model holds %d", got.Remaining, m.buffered())
	}
	r.checkSize()
	if len(got.Entries) == want || got.AtCap {
		return
	}
	// Guarantee 4: a short pop is the queue's limits, or no group may go.
	if (qcap > 0 && m.queueExecuting() >= qcap) || (m.queue.Rate > 0 && qtokens < 1+eps) {
		return
	}
	rateBlocked, unsure := false, false
	for g, mg := range m.groups {
		switch m.eligible(g) {
		case 1:
			r.t.Fatalf("short pop (%d of %d) while group %q may go (guarantee 4)", len(got.Entries), want, g)
		case -1:
			unsure = true
		case 0:
			if _, c, rate, _ := m.eff(g); len(mg.buf) > 0 && rate > 0 && (c == 0 || len(mg.executing) < c) {
				rateBlocked = true
			}
		}
	}
	if rateBlocked && !unsure && got.RetryAfter <= 0 {
		r.t.Fatalf("short pop held back by group rates carries no retry-after: %+v", got)
	}
}

// checkSize: FairSize counts the buffered ids and the groups holding them.
func (r *fairRun) checkSize() {
	ids, groups, err := r.b.FairSize(context.Background(), r.queue)
	if err != nil {
		r.t.Fatal(err)
	}
	active := 0
	for _, mg := range r.m.groups {
		if len(mg.buf) > 0 {
			active++
		}
	}
	if int(ids) != r.m.buffered() || int(groups) != active {
		r.t.Fatalf("FairSize %d ids in %d groups, model %d in %d", ids, groups, r.m.buffered(), active)
	}
}

// remove deletes random buffered tasks (a cancel), and one id never buffered.
func (r *fairRun) remove() {
	var slots []buffer.GroupSlot
	for _, g := range groupNames { // in a fixed order: rapid replays draws
		mg := r.m.group(g)
		kept := mg.buf[:0]
		for _, t := range mg.buf {
			if rapid.IntRange(0, 2).Draw(r.t, "drop") == 0 {
				slots = append(slots, buffer.GroupSlot{Group: g, ID: t.id})
			} else {
				kept = append(kept, t)
			}
		}
		mg.buf = kept
	}
	slots = append(slots, buffer.GroupSlot{Group: "a", ID: uuid.New()})
	sort.Slice(slots, func(i, j int) bool { return slots[i].ID.String() < slots[j].ID.String() })
	if err := r.b.RemoveGrouped(context.Background(), r.queue, slots, int64(r.m.levelWeight())); err != nil {
		r.t.Fatal(err)
	}
	r.checkSize()
}

func (r *fairRun) executing(all bool) []buffer.GroupSlot {
	var out []buffer.GroupSlot
	for g, mg := range r.m.groups {
		for id, lost := range mg.executing {
			if all || !lost {
				out = append(out, buffer.GroupSlot{Group: g, ID: id})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID.String() < out[j].ID.String() })
	return out
}

// release acks a random executing task; lost: its release never reaches Redis (a
// crash), and only reconcile frees the slot.
func (r *fairRun) release(lost bool) {
	ex := r.executing(false)
	if len(ex) == 0 {
		return
	}
	s := rapid.SampledFrom(ex).Draw(r.t, "task")
	mg := r.m.group(s.Group)
	if lost {
		mg.executing[s.ID] = true
		return
	}
	delete(mg.executing, s.ID)
	if err := r.b.ReleaseGroup(context.Background(), r.queue, s.Group, s.ID); err != nil {
		r.t.Fatal(err)
	}
}

// reconcile rebuilds slots from what "PostgreSQL" shows executing, grace 0.
func (r *fairRun) reconcile() {
	if _, _, _, _, err := r.b.ReconcileGrouped(context.Background(), r.queue, r.executing(false), 0); err != nil {
		r.t.Fatal(err)
	}
	for _, mg := range r.m.groups {
		for id, lost := range mg.executing {
			if lost {
				delete(mg.executing, id)
			}
		}
	}
	r.m.synced = true
}

func optInt(t *rapid.T, label string, lo, hi int) *int {
	if rapid.Bool().Draw(t, label+"_set") {
		v := rapid.IntRange(lo, hi).Draw(t, label)
		return &v
	}
	return nil
}

var rates = []float64{0.5, 1, 2.5, 10}

func (r *fairRun) setGroup() {
	g := rapid.SampledFrom(groupNames).Draw(r.t, "group")
	var s buffer.GroupSettings
	s.Weight = optInt(r.t, "weight", 1, 4)
	s.MaxConcurrency = optInt(r.t, "cap", 1, 3)
	if rapid.Bool().Draw(r.t, "rate_set") {
		v := rapid.SampledFrom(rates).Draw(r.t, "rate")
		s.Rate = &v
	}
	s.Burst = optInt(r.t, "burst", 1, 3)
	mg := r.m.group(g)
	if mg.over.MaxConcurrency == nil && s.MaxConcurrency != nil {
		r.m.synced = false
	}
	_, _, r0, b0 := r.m.eff(g)
	mg.over = s
	if _, _, r1, b1 := r.m.eff(g); r0 != r1 || b0 != b1 {
		mg.epoch++
	}
	if err := r.b.SetGroup(context.Background(), r.queue, g, s); err != nil {
		r.t.Fatal(err)
	}
}

func (r *fairRun) setDefaults() {
	d := buffer.GroupLimits{MaxConcurrency: rapid.IntRange(0, 3).Draw(r.t, "dcap")}
	if rapid.Bool().Draw(r.t, "drate_set") {
		d.Rate = rapid.SampledFrom(rates).Draw(r.t, "drate")
		d.Burst = rapid.IntRange(0, 3).Draw(r.t, "dburst")
	}
	before := map[string][2]float64{}
	for g := range r.m.groups {
		_, _, rate, burst := r.m.eff(g)
		before[g] = [2]float64{rate, float64(burst)}
	}
	r.m.defaults = d
	for g, mg := range r.m.groups {
		if _, _, rate, burst := r.m.eff(g); before[g] != [2]float64{rate, float64(burst)} {
			mg.epoch++
		}
	}
}

func (r *fairRun) setQueue() {
	q := ratelimit.Limits{MaxConcurrency: rapid.IntRange(0, 6).Draw(r.t, "qcap"), Paused: rapid.IntRange(0, 5).Draw(r.t, "paused") == 0,
		AgingMs: rapid.SampledFrom([]int64{0, 1000}).Draw(r.t, "aging_ms")}
	if rapid.Bool().Draw(r.t, "qrate_set") {
		q.Rate = rapid.SampledFrom([]float64{2, 5, 20}).Draw(r.t, "qrate")
		q.Burst = rapid.IntRange(1, 6).Draw(r.t, "qburst")
	}
	if q.MaxConcurrency > 0 && r.m.queue.MaxConcurrency == 0 {
		// As the API does when a queue's cap is switched on.
		if err := r.b.Unsync(context.Background(), r.queue); err != nil {
			r.t.Fatal(err)
		}
		r.m.synced = false
	}
	r.m.queue = q
}

func (r *fairRun) tick() {
	r.m.nowUs += rapid.Int64Range(0, 2_000_000).Draw(r.t, "step_us")
}

// checkRates: guarantee 2, in every window between two starts of a group under one
// setting, at most burst + rate·T starts.
func (r *fairRun) checkRates() {
	for g, mg := range r.m.groups {
		s := mg.starts
		for i := range s {
			for j := i; j < len(s) && s[j].epoch == s[i].epoch; j++ {
				limit := float64(s[i].burst) + s[i].rate*float64(s[j].us-s[i].us)/1e6
				if float64(j-i+1) > limit+eps {
					r.t.Fatalf("group %q started %d in %d µs: over burst %d + rate %v·T", g, j-i+1, s[j].us-s[i].us, s[i].burst, s[i].rate)
				}
			}
		}
	}
}

func runFairModel(rt *rapid.T, b *buffer.Buffer) {
	m := &model{groups: map[string]*mGroup{}, nowUs: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixMicro()}
	if rapid.Bool().Draw(rt, "aging") {
		m.queue.AgingMs = 1000
	}
	r := &fairRun{t: rt, b: b.WithClock(func() time.Time { return time.UnixMicro(m.nowUs) }), queue: uuid.NewString(), m: m}
	steps := rapid.IntRange(1, 60).Draw(rt, "steps")
	for range steps {
		switch op := rapid.IntRange(0, 11).Draw(rt, "op"); {
		case op <= 2:
			r.add()
		case op <= 5:
			r.pop()
		case op == 6:
			r.release(false)
		case op == 7:
			r.release(rapid.Bool().Draw(rt, "lost"))
		case op == 8:
			switch rapid.IntRange(0, 4).Draw(rt, "what") {
			case 4:
				r.remove()
			case 0:
				r.setGroup()
			case 1:
				r.setDefaults()
			case 2:
				r.setQueue()
			case 3:
				r.reconcile()
			}
		default:
			r.tick()
		}
	}
	r.checkRates()
}

// TestFairPopMatchesModel drives the fair pop with random adds, pops, releases (some
// lost), reconciles, settings changes and clock steps, and checks every reply against
// the model: caps and rates hold (guarantees 1, 2), a short pop means no group may go
// (4), priority first (5), group order kept, remaining and sync state exact.
func TestFairPopMatchesModel(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		rapid.Check(t, func(rt *rapid.T) { runFairModel(rt, b) })
	})
}

// TestFairTurnsBound checks guarantee 3 with weights: groups with backlogs (weights
// 1..4) have been taking turns for a while; group B then enqueues k tasks. Until B's
// k tasks are out, every other group X, backlogged throughout, gets at most
// floor(k_B·w_X/w_B) + 1 pops, where k_B is B's count so far (equal weights: at most
// k before B's k-th); and B gets at most floor((k_X+1)·w_B/w_X) + 1: it joins at the
// current turn, with no saved turns. Pops come in random batch sizes.
func TestFairTurnsBound(t *testing.T) {
	backends(t, func(t *testing.T, b *buffer.Buffer) {
		rapid.Check(t, func(rt *rapid.T) {
			ctx := context.Background()
			queue := uuid.NewString()
			w := buffer.LevelWeightMs(0)
			base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			others := rapid.IntRange(1, 4).Draw(rt, "others")
			weights := map[string]int{}
			for i := range others {
				g := fmt.Sprintf("x%d", i)
				weights[g] = rapid.IntRange(1, 4).Draw(rt, "w_"+g)
				// Older tasks than B's: FIFO would serve all of them first.
				if err := b.AddGrouped(ctx, queue, grouped(g, 3, 200, base), w); err != nil {
					rt.Fatal(err)
				}
			}
			weights["b"] = rapid.IntRange(1, 4).Draw(rt, "w_b")
			for g, wt := range weights {
				if err := b.SetGroup(ctx, queue, g, buffer.GroupSettings{Weight: &wt}); err != nil {
					rt.Fatal(err)
				}
			}
			pop := func() []buffer.FairEntry {
				p, err := b.FairPop(ctx, queue, rapid.IntRange(1, 7).Draw(rt, "batch"), ratelimit.Limits{}, buffer.GroupLimits{})
				if err != nil {
					rt.Fatal(err)
				}
				return p.Entries
			}
			for range rapid.IntRange(0, 20).Draw(rt, "warmup_pops") {
				pop()
			}
			k := rapid.IntRange(1, 10).Draw(rt, "k")
			if err := b.AddGrouped(ctx, queue, grouped("b", 3, k, base.Add(time.Hour)), w); err != nil {
				rt.Fatal(err)
			}
			count := map[string]int{}
			for count["b"] < k {
				entries := pop()
				if len(entries) == 0 {
					rt.Fatalf("nothing popped with B's tasks waiting")
				}
				for _, e := range entries {
					if count["b"] == k {
						break
					}
					count[e.Group]++
					wb := float64(weights["b"])
					for x, wx := range weights {
						if x == "b" {
							continue
						}
						cx, cb := count[x], count["b"]
						if e.Group == x && float64(cx) > math.Floor(float64(cb)*float64(wx)/wb)+1 {
							rt.Fatalf("group %s (w %d) got %d turns while b (w %v) got %d", x, wx, cx, wb, cb)
						}
						if e.Group == "b" && float64(cb) > math.Floor(float64(cx+1)*wb/float64(wx))+1 {
							rt.Fatalf("b (w %v) got %d turns while %s (w %d) got %d: saved turns", wb, cb, x, wx, cx)
						}
					}
				}
			}
		})
	})
}
