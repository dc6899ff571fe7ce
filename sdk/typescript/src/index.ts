/**
 * @taskforge/client: the TypeScript SDK of TaskForge for Node.js (>= 20).
 *
 * - {@link Client}: every producer endpoint of the HTTP API (queues, tasks, the
 *   dead-letter queue, schedules) and the worker protocol, over node:http (or a fetch given in ClientOptions).
 * - {@link Worker}: a worker runtime that polls, heartbeats and reports for your
 *   handlers, with AbortSignal-driven graceful shutdown ({@link shutdownSignal}).
 *
 * The HTTP contract is docs/api.md of the TaskForge repository; objects keep the
 * API's field names.
 */
export { Client, DEFAULT_URL, MAX_WAIT_MS, type Answer, type CallOptions, type ClientOptions } from "./client.js";
export {
  LeaseLostError,
  MAX_SNOOZE_MS,
  PermanentError,
  RetryableError,
  SnoozeError,
  TaskCancelledError,
  TaskForgeError,
  TaskTimeoutError,
  WorkerStoppingError,
  isErrorCode,
  permanent,
  retryAfter,
  snooze,
  type ErrorCode,
} from "./errors.js";
export * from "./types.js";
export { Job, Worker, shutdownSignal, type Handler, type Logger, type WorkerOptions } from "./worker.js";
