// Package dashboard serves TaskForge's live admin dashboard at /admin: the on-call
// engineer's view of every queue, task, dead letter and worker, with one-click fixes
// (pause, replay, cancel, settings).
//
// It owns three things:
//
//   - The page: plain HTML, CSS and ES modules embedded with //go:embed (no build
//     step), plus uPlot, vendored with its licence, for the throughput chart. Every
//     /admin response carries a strict Content-Security-Policy (see [CSP]): no
//     inline script or style, nothing from another origin, and Trusted Types, so the
//     browser itself refuses any attempt to assign a string to innerHTML. The page
//     builds its DOM with createElement and textContent only, so payloads, errors,
//     queue names and worker ids always render as text.
//   - The live feed: GET /admin/events, a server-sent-event stream. One hub per
//     replica computes a snapshot (queues, their stats, workers, a throughput point)
//     every second while at least one browser listens, encodes it once and fans the
//     same bytes out to every subscriber; a slow subscriber only ever misses
//     intermediate snapshots. The hub keeps a few minutes of throughput history for
//     the chart, lingers a minute after the last browser leaves (so a reload keeps
//     the chart), and stops for good when the context given to [Mount] ends, closing
//     every stream so that an HTTP shutdown is not held up by open dashboards.
//   - One read-only helper endpoint, GET /admin/api/queues/:name/dlq, the dead-letter
//     listing filtered by time of death, which the public API lacks.
//
// Every state change the page makes goes through the public JSON API (PATCH
// /queues/:name, DELETE /queues/:name/tasks/:id, the DLQ replay and discard routes).
// The dashboard package never writes to PostgreSQL or Redis itself; it reads through
// storage.Store only. The API refuses cross-site state-changing requests (see
// api.Config.TrustedOrigins), so another web page cannot drive an operator's browser
// into changing anything.
package dashboard
