// Audit log: the operator actions the server recorded (GET /audit), newest first:
// who did what to which queue or task, how the API answered, and with what request.
// Filtered by queue (in the URL), paged with "Load more"; the first page is read
// again on Refresh and, for entries newer than those shown, every few seconds while
// the live feed runs.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q, ApiError } from '../api.js';
import { queueNames } from '../live.js';
import * as fmt from '../format.js';
import { jsonView } from '../json.js';
import { empty, errorBox, busy, field, queueSelect, fillQueueSelect } from '../ui.js';

const pageSize = 100;
const refreshEvery = 5000; // ms between two background reads of the first page
const requestChars = 48;   // characters of the compact request shown in the row

// What each audited route does, in words.
const labels = {
  'POST /queues': 'created queue',
  'PATCH /queues/:name': 'changed settings',
  'POST /queues/:name/pause': 'paused queue',
  'POST /queues/:name/resume': 'resumed queue',
  'DELETE /queues/:name': 'deleted queue',
  'DELETE /queues/:name/tasks/:id': 'cancelled task',
  'POST /queues/:name/dlq/replay': 'replayed dead tasks',
  'POST /queues/:name/dlq/:id/replay': 'replayed dead task',
  'DELETE /queues/:name/dlq/:id': 'discarded dead task',
  'DELETE /queues/:name/dlq': 'discarded dead tasks',
  'POST /queues/:name/tasks/cancel': 'cancelled tasks',
  'POST /tokens': 'minted token',
  'DELETE /tokens/:id': 'revoked token',
};

const vias = {
  token: 'API token',
  session: 'dashboard session',
  open: 'open API, no credentials',
};

const statusTexts = {
  200: 'OK', 201: 'Created', 202: 'Accepted', 204: 'No Content', 400: 'Bad Request', 401: 'Unauthorized',
  403: 'Forbidden', 404: 'Not Found', 409: 'Conflict', 413: 'Payload Too Large', 422: 'Unprocessable Entity',
  429: 'Too Many Requests', 500: 'Internal Server Error', 503: 'Service Unavailable',
};

export function audit() {
  let params = {};
  let cursor = null;
  let seq = 0;
  let loaded = false;   // the list shows a successful first page
  let loading = false;
  let lastRead = 0;     // Date.now() of the last read of the first page
  const rows = new Map(); // id → tr

  const queue = queueSelect([], '', { all: 'all queues', id: 'a-queue' });
  const refresh = h('button', { type: 'button', class: 'btn', id: 'audit-refresh', text: 'Refresh' });
  const form = h('form', { class: 'filters', id: 'audit-filters', role: 'search', 'aria-label': 'Filter the audit log' },
    field('Queue', queue), h('div', { class: 'filter-actions' }, refresh));
  queue.addEventListener('change', () => form.requestSubmit());

  const tbody = h('tbody');
  const table = h('table', { class: 'grid audit', id: 'audit-list' },
    h('thead', null, h('tr', null,
      ...['Time', 'Actor', 'Action', 'Queue', 'Target', 'Status', 'Request'].map((t) => h('th', { scope: 'col', text: t })))),
    tbody);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const state = h('div', { class: 'list-state' });
  const more = h('button', { type: 'button', class: 'btn', id: 'audit-more', text: 'Load more', hidden: true });
  const shown = h('span', { class: 'muted small', id: 'audit-shown' });
  const root = h('div', { class: 'view view-audit' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Audit log' }),
      h('span', { class: 'muted small', text: 'Operator actions, newest first' })),
    h('section', { class: 'card' }, form),
    h('section', { class: 'card', 'aria-label': 'Audit entries' }, wrap, state, h('div', { class: 'list-foot' }, shown, more)));

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const fragment = hashLink('audit', { queue: queue.value });
    if (location.hash === fragment) load(false);
    else location.hash = fragment;
  });
  refresh.addEventListener('click', () => busy(refresh, () => load(false)));
  more.addEventListener('click', () => busy(more, () => load(true)));

  function query(extra = {}) {
    const s = new URLSearchParams({ limit: String(pageSize) });
    if (params.queue) s.set('queue', params.queue);
    for (const [k, v] of Object.entries(extra)) s.set(k, v);
    return s.toString();
  }

  // load reads the first page (append false) or the next one.
  async function load(append) {
    const my = ++seq;
    if (!append) { cursor = null; loaded = false; lastRead = Date.now(); }
    loading = true;
    replace(state, append ? null : h('p', { class: 'muted', text: 'Loading…' }));
    try {
      const data = await api('GET', `/audit?${query(cursor && append ? { cursor } : {})}`);
      if (my !== seq) return;
      if (!append) { rows.clear(); replace(tbody); }
      for (const e of data.entries) {
        if (rows.has(e.id)) continue;
        const tr = row(e);
        rows.set(e.id, tr);
        tbody.append(tr);
      }
      cursor = data.next_cursor;
      loaded = true;
      showState();
    } catch (err) {
      if (my !== seq) return;
      wrap.hidden = rows.size === 0;
      replace(state, err instanceof ApiError && err.status === 403
        ? empty('The audit log is for admins.', err.message) : errorBox(err));
    } finally {
      if (my === seq) loading = false;
    }
  }

  // catchUp adds the entries recorded since the newest one shown, at the top.
  async function catchUp() {
    const my = ++seq;
    loading = true;
    lastRead = Date.now();
    try {
      const data = await api('GET', `/audit?${query()}`);
      if (my !== seq) return;
      const wasEmpty = rows.size === 0;
      const newest = wasEmpty ? 0 : Math.max(...rows.keys());
      const fresh = data.entries.filter((e) => e.id > newest);
      if (!wasEmpty && fresh.length === data.entries.length && data.next_cursor) {
        // A page or more of new entries: what lies between is unknown; start over.
        loading = false;
        load(false);
        return;
      }
      if (!fresh.length) return;
      const first = tbody.firstChild;
      for (const e of fresh) {
        const tr = row(e);
        rows.set(e.id, tr);
        tbody.insertBefore(tr, first);
      }
      if (wasEmpty) cursor = data.next_cursor;
      showState();
    } catch { /* the next refresh tries again; Refresh shows the error */ } finally {
      if (my === seq) loading = false;
    }
  }

  function showState() {
    more.hidden = !cursor;
    wrap.hidden = rows.size === 0;
    const n = rows.size;
    setText(shown, n ? `${fmt.count(n)} ${n === 1 ? 'entry' : 'entries'} shown${cursor ? ', more available' : ''}` : '');
    replace(state, n ? null : empty(params.queue ? `No operator actions recorded yet on ${params.queue}.` : 'No operator actions recorded yet.',
      'Creating, changing, pausing, resuming or deleting a queue, cancelling a task, replaying or discarding dead tasks, and minting or revoking a token are recorded here.'));
  }

  function row(e) {
    const via = h('span', { class: ['badge', 'via', 'via-' + String(e.via).replace(/[^a-z]/g, '')], text: e.via, title: vias[e.via] || e.via });
    const actorTitle = [e.token_id ? 'Token ' + e.token_id : null, e.remote_addr ? 'from ' + e.remote_addr : null].filter(Boolean).join(', ');
    const action = `${e.method} ${e.route}`;
    const label = labelFor(e);
    return h('tr', { dataset: { entry: String(e.id) } },
      h('td', { dataset: { col: 'at' } }, h('time', { datetime: e.at, title: fmt.exact(e.at), text: fmt.time(e.at) })),
      h('td', { dataset: { col: 'actor' } }, h('span', { class: 'audit-actor', text: e.actor, title: actorTitle || null }), ' ', via),
      h('td', { dataset: { col: 'action' } },
        label ? h('span', { class: 'audit-label', text: label }) : null,
        h('span', { class: 'mono audit-route', text: action })),
      h('td', { dataset: { col: 'queue' } }, queueLink(e)),
      h('td', { dataset: { col: 'target' } }, targetCell(e)),
      h('td', { dataset: { col: 'status' } }, statusBadge(e.status)),
      h('td', { class: 'audit-request', dataset: { col: 'request' } }, requestCell(e)));
  }

  function queueLink(e) {
    if (e.queue === null || e.queue === undefined) return h('span', { class: 'muted', text: '—' });
    const dead = e.route.includes('/dlq');
    const tasks = e.route.includes('/tasks');
    const view = dead ? 'dlq' : tasks ? 'tasks' : 'settings';
    const a = h('a', { class: 'chip clip clip-short', href: hashLink(view, { queue: e.queue }), text: e.queue, title: e.queue });
    a.setAttribute('aria-label', `${e.queue}: ${dead ? 'dead letters' : tasks ? 'tasks' : 'settings'}`);
    return a;
  }

  function targetCell(e) {
    if (e.target === null || e.target === undefined) return h('span', { class: 'muted', text: '—' });
    if (e.queue && (e.route.includes('/tasks/') || e.route.includes('/dlq/'))) {
      const a = h('a', { class: 'mono', href: hashLink('tasks', { queue: e.queue, task: e.target }), text: fmt.shortId(e.target), title: e.target });
      a.setAttribute('aria-label', 'Task ' + e.target);
      return a;
    }
    return h('span', { class: 'mono', text: fmt.shortId(e.target), title: e.target });
  }

  return {
    title: 'Audit log',
    root,
    mount: route,
    route,
    update(snap) {
      fillQueueSelect(queue, snap.queues.map((x) => x.name), params.queue || '');
      if (loaded && !loading && Date.now() - lastRead >= refreshEvery) catchUp();
    },
    unmount() { seq++; },
  };

  function route(p) {
    params = { ...p };
    fillQueueSelect(queue, queueNames(), params.queue || '');
    load(false);
  }
}

/** labelFor says what an entry did, or '' for a route it does not know. */
function labelFor(e) {
  const key = `${e.method} ${e.route}`;
  const r = e.request && typeof e.request === 'object' && !Array.isArray(e.request) ? e.request : null;
  if (key === 'PATCH /queues/:name' && r && Object.keys(r).length === 1 && typeof r.paused === 'boolean') {
    return r.paused ? 'paused queue' : 'resumed queue';
  }
  if (key === 'POST /queues/:name/dlq/replay' && r) {
    if (r.all === true) return 'replayed all dead tasks';
    if (Array.isArray(r.ids)) return `replayed ${r.ids.length} dead ${r.ids.length === 1 ? 'task' : 'tasks'}`;
  }
  if (key === 'DELETE /queues/:name/dlq' && r) {
    if (r.all === true) return 'discarded all dead tasks';
    if (Array.isArray(r.ids)) return `discarded ${r.ids.length} dead ${r.ids.length === 1 ? 'task' : 'tasks'}`;
  }
  if (key === 'POST /queues/:name/tasks/cancel' && r) {
    if (typeof r.status === 'string') return `cancelled ${r.status} tasks`;
    if (Array.isArray(r.ids)) return `cancelled ${r.ids.length} ${r.ids.length === 1 ? 'task' : 'tasks'}`;
  }
  return labels[key] || '';
}

function statusBadge(status) {
  const n = Number(status);
  const cls = n >= 500 ? 'st-dead' : n >= 400 ? 'st-retry' : n >= 200 && n < 300 ? 'st-done' : null;
  const text = statusTexts[n] ? `${n} ${statusTexts[n]}` : `HTTP ${n}`;
  const b = h('span', { class: ['badge', 'http-status', cls], text: String(status), title: text });
  b.setAttribute('aria-label', text);
  return b;
}

function requestCell(e) {
  const v = e.request;
  if (v === null || v === undefined) return h('span', { class: 'muted', text: '—' });
  const text = JSON.stringify(v);
  if (v && typeof v === 'object' && Object.keys(v).length === 1 && typeof v.omitted_bytes === 'number') {
    return h('span', { class: 'muted', text: `${fmt.count(v.omitted_bytes)}+ bytes, not kept`, title: 'Not JSON, or over 4 KiB: the body was not recorded' });
  }
  if (text.length <= requestChars) return h('code', { class: 'audit-json', text });
  const details = h('details', { class: 'audit-details' },
    h('summary', { class: 'audit-json mono', text: text.slice(0, requestChars - 1) + '…', title: text }),
    jsonView(v, { label: `Request of entry ${e.id}` }));
  return details;
}
