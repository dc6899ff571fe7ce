package auth

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/taskforge/taskforge/storage"
)

// TokenPrefix starts every API token.
const TokenPrefix = "tf_"

// sessionPrefix starts every dashboard session secret.
const sessionPrefix = "tfs_"

// missKey is the misses bucket's key; missBurst its size.
var missKey = uuid.Nil

const missBurst = 5

// secretBytes is the entropy of a token or session secret.
const secretBytes = 32

// Config tunes a Guard. Zero fields take the defaults.
type Config struct {
	// CacheTTL is how long a replica trusts its cached tokens and sessions: a
	// revocation takes effect everywhere within about this long. Defaults to 1s.
	CacheTTL time.Duration
	// MissRefresh: an unknown credential reloads the cache at once (so a token
	// created elsewhere works at once), but such reloads are limited to one per
	// MissRefresh after a burst of 5, so made-up tokens cannot flood PostgreSQL.
	// Defaults to 100ms.
	MissRefresh time.Duration
	// RateLimit is the requests per second each token may make on each replica,
	// unless the token sets its own. Defaults to 500; negative disables the limit.
	RateLimit float64
	// RateBurst is the bucket size. Defaults to twice the rate (at least 1).
	RateBurst float64
	// MaxPollsPerWorker bounds the concurrent long polls (wait_ms > 0) of one worker
	// id on one replica. Defaults to 4; negative disables the bound.
	MaxPollsPerWorker int
	// SessionTTL is the longest a dashboard session lasts. Defaults to 12h.
	SessionTTL time.Duration
	// Now is the clock of the rate limits, the token cache's age and expiries
	// (tests set it instead of sleeping). Defaults to time.Now.
	Now func() time.Time
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	c.CacheTTL = cmp.Or(c.CacheTTL, time.Second)
	c.MissRefresh = cmp.Or(c.MissRefresh, 100*time.Millisecond)
	c.RateLimit = cmp.Or(c.RateLimit, 500)
	c.RateBurst = cmp.Or(c.RateBurst, max(1, 2*c.RateLimit))
	c.MaxPollsPerWorker = cmp.Or(c.MaxPollsPerWorker, 4)
	c.SessionTTL = cmp.Or(c.SessionTTL, 12*time.Hour)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Principal is the caller a request was authenticated as.
type Principal struct {
	TokenID   uuid.UUID
	Name      string
	Role      Role
	Queues    []string // nil = every queue
	RateLimit *float64
	ExpiresAt *time.Time // the token's, or the session's when sooner
	Session   bool       // authenticated by a dashboard session cookie
}

// AllowsQueue reports whether p may touch queue.
func (p *Principal) AllowsQueue(queue string) bool {
	return p == nil || p.Queues == nil || slices.Contains(p.Queues, queue)
}

func (p *Principal) expired(now time.Time) bool {
	return p.ExpiresAt != nil && !now.Before(*p.ExpiresAt)
}

// snapshot is one load of the unrevoked tokens and live sessions.
type snapshot struct {
	loaded   time.Time
	enabled  bool // at least one unrevoked token
	tokens   map[[32]byte]*Principal
	sessions map[[32]byte]*Principal
}

// Guard authenticates and authorizes requests. It is safe for concurrent use.
type Guard struct {
	store  *storage.Store
	cfg    Config
	log    *slog.Logger
	snap   atomic.Pointer[snapshot]
	mu     sync.Mutex // held while reloading
	rate   *rateLimiter
	misses *rateLimiter // one bucket (missKey): reloads for unknown credentials
	polls  *pollLimiter
	now    func() time.Time
}

// New returns a Guard reading tokens from store. A nil log discards.
func New(store *storage.Store, cfg Config, log *slog.Logger) *Guard {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.WithDefaults()
	return &Guard{store: store, cfg: cfg, log: log, rate: newRateLimiter(), misses: newRateLimiter(), polls: newPollLimiter(cfg.MaxPollsPerWorker), now: cfg.Now}
}

// Enabled reports whether authentication is on: whether an unrevoked token exists.
func (g *Guard) Enabled(ctx context.Context) (bool, error) {
	s, err := g.current(ctx)
	if err != nil {
		return false, err
	}
	return s.enabled, nil
}

// current returns a snapshot no older than CacheTTL, reloading it if needed. When a reload fails it falls back on the previous
// snapshot, if any: a database outage does not switch authentication off.
func (g *Guard) current(ctx context.Context) (*snapshot, error) {
	maxAge := g.cfg.CacheTTL
	s := g.snap.Load()
	if s != nil && g.now().Sub(s.loaded) < maxAge {
		return s, nil
	}
	if s != nil {
		if !g.mu.TryLock() {
			return s, nil // another request is reloading; this one may use the last load
		}
	} else {
		g.mu.Lock()
	}
	defer g.mu.Unlock()
	if fresh := g.snap.Load(); fresh != nil && g.now().Sub(fresh.loaded) < maxAge {
		return fresh, nil
	}
	next, err := g.load(ctx)
	if err != nil {
		if s != nil {
			g.log.Warn("could not reload API tokens; using the previous load", "err", err)
			return s, nil
		}
		return nil, err
	}
	g.snap.Store(next)
	return next, nil
}

// allowMiss spends one reload of the miss budget: a burst of missBurst, refilled
// at one per MissRefresh, so unknown credentials cost at most that many queries.
func (g *Guard) allowMiss() bool {
	ok, _ := g.misses.take(missKey, g.now(), 1/g.cfg.MissRefresh.Seconds(), missBurst)
	return ok
}

// reloadAfter returns a snapshot loaded after seen: another request's, if one
// reloaded meanwhile, else a fresh one.
func (g *Guard) reloadAfter(ctx context.Context, seen *snapshot) (*snapshot, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if cur := g.snap.Load(); cur != nil && cur.loaded.After(seen.loaded) {
		return cur, nil
	}
	next, err := g.load(ctx)
	if err != nil {
		g.log.Warn("could not reload API tokens; using the previous load", "err", err)
		return seen, nil
	}
	g.snap.Store(next)
	return next, nil
}

// invalidate makes the next request reload the cache.
func (g *Guard) invalidate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.snap.Load(); s != nil {
		stale := *s
		stale.loaded = time.Time{}
		g.snap.Store(&stale)
	}
}

func (g *Guard) load(ctx context.Context) (*snapshot, error) {
	started := g.now()
	tokens, sessions, err := g.store.AuthSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	s := &snapshot{loaded: started, enabled: len(tokens) > 0,
		tokens: make(map[[32]byte]*Principal, len(tokens)), sessions: make(map[[32]byte]*Principal, len(sessions))}
	byID := make(map[uuid.UUID]*Principal, len(tokens))
	for _, t := range tokens {
		if len(t.Hash) != sha256.Size {
			continue
		}
		p := &Principal{TokenID: t.ID, Name: t.Name, Role: Role(t.Role), Queues: t.Queues, RateLimit: t.RateLimit, ExpiresAt: t.ExpiresAt}
		s.tokens[[32]byte(t.Hash)] = p
		byID[t.ID] = p
	}
	for _, sess := range sessions {
		p, ok := byID[sess.TokenID]
		if !ok || len(sess.Hash) != sha256.Size || p.Role != RoleAdmin {
			continue
		}
		sp := *p
		sp.Session = true
		if sp.ExpiresAt == nil || sess.ExpiresAt.Before(*sp.ExpiresAt) {
			until := sess.ExpiresAt
			sp.ExpiresAt = &until
		}
		s.sessions[[32]byte(sess.Hash)] = &sp
	}
	return s, nil
}

// lookup finds the principal of a credential hash in the tokens (or sessions),
// reloading the cache once if it is unknown and the cache is not brand new.
func (g *Guard) lookup(ctx context.Context, hash [32]byte, session bool) (*Principal, bool, error) {
	s, err := g.current(ctx)
	if err != nil {
		return nil, false, err
	}
	find := func(s *snapshot) *Principal {
		if session {
			return s.sessions[hash]
		}
		return s.tokens[hash]
	}
	p := find(s)
	if p == nil && s.enabled && g.allowMiss() {
		if s, err = g.reloadAfter(ctx, s); err != nil {
			return nil, false, err
		}
		p = find(s)
	}
	return p, s.enabled, nil
}

// newSecret returns prefix + 32 random bytes in unpadded base64url, and its hash.
func newSecret(prefix string) (string, [32]byte) {
	b := make([]byte, secretBytes)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("crypto/rand failed: %v", err)) // never happens on supported platforms
	}
	secret := prefix + base64.RawURLEncoding.EncodeToString(b)
	return secret, sha256.Sum256([]byte(secret))
}

// secretLen is the length of a secret of the given prefix.
func secretLen(prefix string) int { return len(prefix) + base64.RawURLEncoding.EncodedLen(secretBytes) }

// parseSecret checks a presented secret's shape (prefix, length, alphabet) and
// returns its hash, so malformed ones never reach a lookup.
func parseSecret(prefix, s string) ([32]byte, bool) {
	if len(s) != secretLen(prefix) || !strings.HasPrefix(s, prefix) {
		return [32]byte{}, false
	}
	for _, r := range s[len(prefix):] {
		if !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return [32]byte{}, false
		}
	}
	return sha256.Sum256([]byte(s)), true
}
