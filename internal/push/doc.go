// Package push delivers the tasks of push queues to their HTTP targets (Cloud
// Tasks' model): instead of waiting for a worker's poll, every replica's Pusher
// takes a push queue's tasks exactly as a poll does — the Lua pop with the token
// bucket and the concurrency slots, then the claim in PostgreSQL, both through the
// API server (Broker) — and POSTs each task's payload to the queue's URL.
//
// A Pusher is a few claiming loops (feeders) and a fixed pool of
// Config.Concurrency senders: a feeder reserves idle senders before it claims, and
// claims no more tasks than it reserved, so at most Concurrency requests are in
// flight per replica and no goroutine waits on a buffered task. Feeders sleep until
// the buffer announces work for a push queue, a sender frees up, or a rate limit
// has a token again; while one waits for its claim to commit, another claims for
// the senders freed meanwhile. All requests share one http.Client (connections are
// reused; redirects are not followed).
//
// Each request's attempt is claimed for worker "push:<replica id>" with a lease
// that covers the queue's timeout_ms plus a margin, so a replica that dies
// mid-request loses nothing: the lease expires and the watchdog reclaims the task
// as for any worker. The answer decides the attempt (docs/push.md): 2xx acks it,
// 429, 5xx, a timeout or a connection error nack it as retryable (Retry-After sets
// the delay), any other status nacks it as not retryable. While requests are in
// flight, the Pusher reads once per CancelCheckInterval which of their tasks have a
// cancel requested, and aborts those requests.
//
// A Pusher never changes a task except through the Broker's claim, ack and nack,
// which hold the lease checks every worker is held to.
package push
