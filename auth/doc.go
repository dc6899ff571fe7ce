// Package auth authenticates and authorizes every request to TaskForge's HTTP API
// and dashboard with API tokens, and bounds what one caller may cost a replica.
//
// # Tokens and roles
//
// A token is "tf_" followed by 32 random bytes in unpadded base64url. It is shown
// once, when created; PostgreSQL stores only its SHA-256 hash (api_tokens). A token
// has one role, may expire, may be revoked, and (producer and worker tokens) may be
// restricted to a list of queues. Callers send it as "Authorization: Bearer tf_…".
//
//	role      may call
//	producer  GET /queues, GET /queues/:name, GET /queues/:name/stats,
//	          POST /queues/:name/tasks, POST /queues/:name/tasks/batch,
//	          GET /queues/:name/tasks, GET|DELETE /queues/:name/tasks/:id
//	worker    POST /workers/poll, /workers/heartbeat, /workers/heartbeat/batch, /workers/ack,
//	          /workers/ack/batch, /workers/nack, /workers/release
//	admin     everything: the above, queue create/update/pause/resume/delete, the
//	          dead-letter queue, GET /workers, /metrics, /admin (dashboard), /tokens
//	(anyone)  GET /healthz, GET /readyz, GET /openapi.json, the dashboard's sign-in page and static assets
//
// A queue-restricted token gets 403 on routes naming another queue (:name), and a
// restricted worker token may only poll its queues; GET /queues shows a restricted
// token only its queues. Heartbeat, ack and nack need the task's lease token, which
// only a poll of an allowed queue hands out. Admin tokens cannot be restricted: an
// admin can create tokens, so a restriction would be decoration.
//
// Missing, malformed, unknown, expired and revoked tokens all get 401
// "unauthorized" (with one message, so a caller learns nothing about which); a
// valid token of the wrong role or queue gets 403 "forbidden".
//
// # When authentication is on
//
// Authentication is on while at least one unrevoked token exists (an expired one
// counts, so a server never opens by itself when its tokens expire). With none,
// the API is open, as before tokens existed. Every replica caches the unrevoked
// tokens and live dashboard sessions, reloaded at most once per CacheTTL (1 s) when
// a request needs them, so a revocation takes effect on every replica within about
// a second and a request costs no query. An unknown token triggers a reload only
// when the cache is older than MissRefresh (100 ms), so a token created on another
// replica works at once, and a flood of made-up tokens costs at most ten queries a
// second. When the cache cannot be loaded and there is no previous one, requests get
// 503: auth fails closed, never open.
//
// # Abuse limits
//
// Each token has a token bucket per replica (Config.RateLimit, or the token's own
// rate_limit): over it, 429 "rate_limited" with Retry-After. Each worker id may hold
// at most Config.MaxPollsPerWorker concurrent long polls per replica (429 beyond),
// with or without tokens, so one worker id cannot park unbounded waiters.
//
// # Dashboard sessions
//
// The dashboard's sign-in page takes an admin token and sets an HttpOnly,
// SameSite=Strict cookie holding a fresh random session secret (not the token);
// PostgreSQL keeps only its hash (dashboard_sessions). A session lasts
// Config.SessionTTL (12 h) at most, never outlives its token, ends at sign-out, and
// ends within a second on every replica when its token is revoked.
//
// auth never changes tasks or queues; it only reads tokens and sessions, creates
// and revokes tokens, and creates and deletes sessions.
package auth
