// The live feed: one EventSource on /admin/events. The server pushes a snapshot
// about every second; the browser never polls. Views subscribe to the store.

const listeners = new Set();
const statusListeners = new Set();

/** store holds the newest snapshot and the chart's points. */
export const store = {
  snapshot: null, // the newest Snapshot (see dashboard/snapshot.go)
  points: [],     // chart points, oldest first
  receivedAt: 0,  // Date.now() of the newest snapshot
  status: 'connecting', // connecting | live | stale | down
  problem: '',
};

const maxPoints = 600;
let staleTimer = 0;

function setStatus(status, problem = '') {
  if (store.status === status && store.problem === problem) return;
  store.status = status;
  store.problem = problem;
  for (const fn of statusListeners) fn(store);
}

function addPoint(p) {
  if (!p || typeof p.t !== 'number') return;
  const last = store.points[store.points.length - 1];
  if (last && p.t <= last.t) return;
  store.points.push(p);
  if (store.points.length > maxPoints) store.points.splice(0, store.points.length - maxPoints);
}

/**
 * connect opens the feed. EventSource reconnects by itself after a network error;
 * after an HTTP error (a replica shutting down answers 503) it gives up, so then
 * connect opens a new one a few seconds later.
 */
export function connect() {
  const es = new EventSource('/admin/events');
  es.addEventListener('open', () => setStatus(store.snapshot ? 'live' : 'connecting'));
  es.addEventListener('error', () => {
    setStatus('down', 'Connection to TaskForge lost; reconnecting…');
    if (es.readyState === EventSource.CLOSED) setTimeout(connect, 3000);
  });
  es.addEventListener('history', (e) => {
    store.points = [];
    for (const p of JSON.parse(e.data) || []) addPoint(p);
  });
  es.addEventListener('problem', (e) => {
    setStatus('stale', JSON.parse(e.data).message);
  });
  es.addEventListener('snapshot', (e) => {
    const snap = JSON.parse(e.data);
    store.snapshot = snap;
    store.receivedAt = Date.now();
    addPoint(snap.point);
    setStatus('live');
    clearTimeout(staleTimer);
    staleTimer = setTimeout(() => setStatus('stale', 'No update for 5 seconds.'), 5000);
    for (const fn of listeners) fn(snap);
  });
  return es;
}

/** onSnapshot calls fn with each new snapshot; it returns the unsubscribe function. */
export function onSnapshot(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** onStatus calls fn when the connection status changes. */
export function onStatus(fn) {
  statusListeners.add(fn);
  return () => statusListeners.delete(fn);
}

/** queueNames lists the queues of the newest snapshot. */
export function queueNames() {
  return store.snapshot ? store.snapshot.queues.map((q) => q.name) : [];
}

/** findQueue returns the queue state of the newest snapshot, or undefined. */
export function findQueue(name) {
  return store.snapshot ? store.snapshot.queues.find((q) => q.name === name) : undefined;
}
