// Task inspector: filter a queue's tasks by status, worker and creation time,
// page through them, and open one for its payload, result, last error and attempt
// history; cancel (or replay, when dead) from the page, or cancel a selection of
// the tasks shown in one request.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q, ApiError } from '../api.js';
import { store, queueNames } from '../live.js';
import * as fmt from '../format.js';
import { jsonView } from '../json.js';
import { badge, empty, errorBox, toast, confirm, busy, field, queueSelect, fillQueueSelect, pre } from '../ui.js';
import { rememberReplay } from '../replays.js';

const statuses = ['pending', 'blocked', 'claimed', 'executing', 'retry', 'done', 'dead', 'cancelled'];
const waiting = new Set(['pending', 'blocked', 'claimed', 'retry', 'executing']);

export function tasks() {
  let params = {};
  let cursor = null;
  let loadSeq = 0;
  let detailSeq = 0;
  const rowsById = new Map();
  const checks = new Map(); // id → checkbox, for tasks that can still be cancelled

  const queue = queueSelect([], '', { id: 'f-queue' });
  const status = h('select', { id: 'f-status', name: 'status' },
    h('option', { value: '', text: 'any status' }), statuses.map((s) => h('option', { value: s, text: s })));
  const worker = h('input', { id: 'f-worker', name: 'worker', type: 'search', placeholder: 'worker id', autocomplete: 'off', spellcheck: 'false' });
  const group = h('input', { id: 'f-group', name: 'group', type: 'search', placeholder: 'group (fair queues)', autocomplete: 'off', spellcheck: 'false' });
  const after = h('input', { id: 'f-after', name: 'after', type: 'datetime-local', step: '1' });
  const before = h('input', { id: 'f-before', name: 'before', type: 'datetime-local', step: '1' });
  const limit = h('select', { id: 'f-limit', name: 'limit' }, ['25', '50', '100', '200'].map((n) => h('option', { value: n, text: n })));
  limit.value = '50';
  const apply = h('button', { type: 'submit', class: 'btn btn-primary', text: 'Apply' });
  const reset = h('button', { type: 'button', class: 'btn btn-ghost', text: 'Reset' });
  const form = h('form', { class: 'filters', id: 'task-filters', role: 'search', 'aria-label': 'Filter tasks' },
    field('Queue', queue), field('Status', status), field('Worker', worker), field('Group', group),
    field('Created after', after), field('Created before', before), field('Page size', limit),
    h('div', { class: 'filter-actions' }, apply, reset));

  const all = h('input', { type: 'checkbox', id: 'tasks-all', 'aria-label': 'Select all cancellable tasks shown' });
  const selCount = h('span', { class: 'sel-count', id: 'tasks-selected', text: 'None selected' });
  const cancelSel = h('button', { type: 'button', class: 'btn btn-ghost-danger', id: 'cancel-selected', text: 'Cancel selected', disabled: true });
  const tbody = h('tbody');
  const table = h('table', { class: 'grid tasks', id: 'task-list' },
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', class: 'check' }, all),
      ...['Task', 'Status', 'Priority', 'Attempts', 'Worker', 'Created', 'Updated', 'Last error']
        .map((t) => h('th', { scope: 'col', class: ['Priority', 'Attempts'].includes(t) ? 'num' : null, text: t })))),
    tbody);
  const listWrap = h('div', { class: 'table-wrap' }, table);
  const listState = h('div', { class: 'list-state' });
  const more = h('button', { type: 'button', class: 'btn', id: 'load-more', text: 'Load more', hidden: true });
  const shown = h('span', { class: 'muted small' });
  const detail = h('aside', { class: 'detail card', id: 'task-detail', 'aria-label': 'Task detail', tabindex: '-1' });

  const root = h('div', { class: 'view view-tasks' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Tasks' })),
    h('section', { class: 'card' }, form),
    h('div', { class: 'inspector' },
      h('section', { class: 'card list', 'aria-label': 'Tasks found' },
        h('div', { class: 'bulk-bar' }, selCount, cancelSel), listWrap, listState,
        h('div', { class: 'list-foot' }, shown, more)),
      detail));

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    go(hashLink('tasks', {
      queue: queue.value, status: status.value, worker: worker.value.trim(), group: group.value.trim(),
      after: fmt.fromLocalInput(after.value), before: fmt.fromLocalInput(before.value),
      limit: limit.value === '50' ? '' : limit.value, task: params.task,
    }));
  });

  // go navigates to a fragment; the same one again reloads the list.
  function go(fragment) {
    if (location.hash === fragment) loadPage(false);
    else location.hash = fragment;
  }
  reset.addEventListener('click', () => { location.hash = hashLink('tasks', { queue: queue.value }); });
  more.addEventListener('click', () => busy(more, () => loadPage(true)));
  all.addEventListener('change', () => {
    for (const c of checks.values()) c.checked = all.checked;
    selectionChanged();
  });
  cancelSel.addEventListener('click', () => cancelSelected());

  function chosen() { return [...checks.entries()].filter(([, c]) => c.checked).map(([id]) => id); }

  function selectionChanged() {
    const n = chosen().length;
    setText(selCount, n ? `${n} selected` : 'None selected');
    cancelSel.disabled = n === 0;
    setText(cancelSel, n ? `Cancel selected (${n})` : 'Cancel selected');
    all.checked = n > 0 && n === checks.size;
    all.indeterminate = n > 0 && n < checks.size;
  }

  async function cancelSelected() {
    const ids = chosen();
    if (!ids.length) return;
    const ok = await confirm({ title: `Cancel ${ids.length} ${ids.length === 1 ? 'task' : 'tasks'}?`, action: `Cancel ${ids.length}`, destructive: true,
      body: [h('p', { text: 'Tasks not yet running are cancelled at once and never run; executing ones are asked to stop at their worker\'s next heartbeat.' })] });
    if (!ok) return;
    await busy(cancelSel, async () => {
      try {
        const res = await api('POST', `/queues/${q(params.queue)}/tasks/cancel`, { ids });
        toast(`Cancelled ${res.cancelled} ${res.cancelled === 1 ? 'task' : 'tasks'}` +
          (res.cancel_requested ? `; ${res.cancel_requested} executing stop at their next heartbeat.` : '.'));
      } catch (err) {
        toast('Could not cancel: ' + err.message, { kind: 'bad' });
      }
    });
    await loadPage(false);
  }

  function listQuery() {
    const s = new URLSearchParams();
    if (params.status) s.set('status', params.status);
    if (params.worker) s.set('worker_id', params.worker);
    if (params.group) s.set('group', params.group);
    if (params.after) s.set('created_after', params.after);
    if (params.before) s.set('created_before', params.before);
    s.set('limit', params.limit || '50');
    if (cursor) s.set('cursor', cursor);
    return s.toString();
  }

  async function loadPage(append) {
    const seq = ++loadSeq;
    if (!params.queue) {
      replace(tbody);
      listWrap.hidden = true;
      more.hidden = true;
      setText(shown, '');
      replace(listState, empty('No queue to inspect.', 'Tasks appear here once a queue exists.'));
      return;
    }
    if (!append) { cursor = null; rowsById.clear(); checks.clear(); }
    replace(listState, append ? null : h('p', { class: 'muted', text: 'Loading…' }));
    try {
      const data = await api('GET', `/queues/${q(params.queue)}/tasks?${listQuery()}`);
      if (seq !== loadSeq) return;
      if (!append) replace(tbody);
      for (const t of data.tasks) {
        const tr = taskRow(t);
        rowsById.set(t.id, tr);
        tbody.append(tr);
      }
      cursor = data.next_cursor;
      more.hidden = !cursor;
      listWrap.hidden = rowsById.size === 0;
      setText(shown, rowsById.size ? `${fmt.count(rowsById.size)} ${rowsById.size === 1 ? 'task' : 'tasks'} shown${cursor ? ', more available' : ''}` : '');
      replace(listState, rowsById.size ? null : empty('No tasks match these filters.',
        params.status || params.worker || params.after || params.before ? 'Try a wider time range or another status.' : 'Enqueue one with POST /queues/' + params.queue + '/tasks.'));
      markSelected();
      selectionChanged();
    } catch (err) {
      if (seq !== loadSeq) return;
      listWrap.hidden = rowsById.size === 0;
      replace(listState, errorBox(err));
    }
  }

  function taskRow(t) {
    const link = h('a', { class: 'mono', href: hashLink('tasks', { ...linkParams(), task: t.id }), text: fmt.shortId(t.id), title: t.id });
    link.setAttribute('aria-label', `Task ${t.id}, ${t.status}`);
    const check = h('input', { type: 'checkbox', 'aria-label': 'Select task ' + t.id, disabled: !waiting.has(t.status) });
    if (waiting.has(t.status)) {
      checks.set(t.id, check);
      check.addEventListener('change', selectionChanged);
    } else {
      checks.delete(t.id);
    }
    return h('tr', { dataset: { task: t.id } },
      h('td', { class: 'check' }, check),
      h('td', null, link),
      h('td', null, badge(t.status), t.cancel_requested ? badge('cancel_requested', 'cancelling') : null),
      h('td', { class: 'num', text: t.priority }),
      h('td', { class: 'num', text: `${t.attempts} / ${runsAllowed(t)}` }),
      h('td', { class: 'mono clip clip-short', text: t.claimed_by || '—', title: t.claimed_by || '' }),
      h('td', { text: fmt.time(t.created_at), title: fmt.exact(t.created_at) }),
      h('td', { text: fmt.ago(t.updated_at), title: fmt.exact(t.updated_at) }),
      h('td', { class: 'clip error-text', text: t.last_error || '', title: t.last_error || '' }));
  }

  function linkParams() {
    const { task, ...rest } = params;
    return rest;
  }

  function markSelected() {
    for (const [id, tr] of rowsById) tr.classList.toggle('selected', id === params.task);
  }

  async function loadDetail(reveal = false) {
    const seq = ++detailSeq;
    markSelected();
    if (!params.task) {
      replace(detail, empty('Select a task', 'to see its payload, result, last error and attempt history.'));
      detail.classList.add('detail-empty');
      return;
    }
    detail.classList.remove('detail-empty');
    replace(detail, h('p', { class: 'muted', text: 'Loading task…' }));
    // The task's queue: the one given, else each known queue in turn (links from
    // the worker panel know only the id).
    const candidates = [params.queue, ...queueNames().filter((n) => n !== params.queue)].filter(Boolean);
    let lastErr = null;
    for (const name of candidates) {
      try {
        const t = await api('GET', `/queues/${q(name)}/tasks/${q(params.task)}`, undefined, { lossless: true });
        if (seq !== detailSeq) return;
        renderDetail(t);
        if (reveal) {
          // Keyboard users land on the task; on narrow screens it is below the list.
          detail.focus({ preventScroll: true });
          if (matchMedia('(max-width: 1180px)').matches) detail.scrollIntoView({ block: 'start' });
        }
        return;
      } catch (err) {
        lastErr = err;
        if (!(err instanceof ApiError) || err.status !== 404) break;
      }
    }
    if (seq !== detailSeq) return;
    replace(detail, lastErr && lastErr.status !== 404 ? errorBox(lastErr) :
      empty('Task not found.', `No task ${params.task} in ${candidates.length > 1 ? 'any queue' : params.queue || 'any queue'}.`));
  }

  function renderDetail(t) {
    const actions = h('div', { class: 'detail-actions' });
    if (waiting.has(t.status) && !t.cancel_requested) {
      const cancel = h('button', { type: 'button', class: 'btn btn-danger', id: 'cancel-task', text: 'Cancel task' });
      cancel.addEventListener('click', () => cancelTask(t, cancel));
      actions.append(cancel);
    }
    if (t.status === 'dead') {
      const replay = h('button', { type: 'button', class: 'btn btn-primary', id: 'replay-task', text: 'Replay' });
      replay.addEventListener('click', () => replayTask(t, replay));
      actions.append(replay);
    }
    const refresh = h('button', { type: 'button', class: 'btn btn-ghost', text: 'Refresh' });
    refresh.addEventListener('click', () => loadDetail());
    const close = h('a', { class: 'btn btn-ghost', href: hashLink('tasks', linkParams()), text: 'Close' });
    actions.append(refresh, close);

    const history = t.attempt_history || [];
    const kv = [
      ['Queue', h('a', { href: hashLink('tasks', { queue: t.queue }), text: t.queue })],
      ['Priority', String(t.priority)],
      ['Group', t.group ? h('a', { class: 'mono', href: hashLink('tasks', { queue: t.queue, group: t.group }), text: t.group, title: 'Tasks of this group' }) : '—'],
      ['Attempts', `${t.attempts} of at most ${runsAllowed(t)}` + (t.releases ? ` (${t.releases} handed back by stopping workers, not counted)` : '')],
      ['Scheduled', timeCell(t.scheduled_at)],
      ['Created', timeCell(t.created_at)],
      ['Updated', timeCell(t.updated_at)],
      ['Finished', timeCell(t.finished_at)],
      ['Claimed by', t.claimed_by ? h('span', { class: 'mono', text: t.claimed_by }) : '—'],
      ['Lease expires', t.lease_expires_at ? timeCell(t.lease_expires_at) : '—'],
      ['Timeout', t.timeout_seconds ? fmt.duration(t.timeout_seconds) : 'none'],
      ['Idempotency key', t.idempotency_key ? h('span', { class: 'mono', text: t.idempotency_key }) : '—'],
      ['Debounce key', t.debounce_key ? h('span', { class: 'mono', text: `${t.debounce_key} (replaced ${t.debounced || 0}×)` }) : '—'],
      ['Replayed from', t.replayed_from ? h('a', { class: 'mono', href: hashLink('tasks', { queue: t.queue, task: t.replayed_from }), text: t.replayed_from }) : '—'],
      ['Replays', t.replay_count ? `${t.replay_count} (last ${fmt.time(t.replayed_at)})` : '0'],
    ];
    replace(detail,
      h('div', { class: 'detail-head' },
        h('h2', { class: 'card-title' }, 'Task ', h('span', { class: 'mono', id: 'detail-id', text: t.id })),
        h('div', { class: 'detail-status' }, badge(t.status), t.cancel_requested ? badge('cancel_requested', 'cancel requested') : null)),
      actions,
      h('dl', { class: 'kv' }, kv.map(([k, v]) => [h('dt', { text: k }), h('dd', null, v)])),
      t.last_error ? h('section', { class: 'detail-section' }, h('h3', { text: 'Last error' }), pre(t.last_error, 'error-pre')) : null,
      h('section', { class: 'detail-section' }, h('h3', { text: 'Payload' }), jsonView(t.payload, { label: 'Payload' })),
      t.progress === null || t.progress === undefined ? null : h('section', { class: 'detail-section', id: 'detail-progress' },
        h('h3', { text: t.status === 'executing' ? 'Progress' : 'Progress (of the last attempt)' }), jsonView(t.progress, { label: 'Progress' })),
      h('section', { class: 'detail-section' }, h('h3', { text: 'Result' }),
        t.result === null || t.result === undefined ? h('p', { class: 'muted', text: t.status === 'done' ? 'The worker acknowledged without a result.' : 'No result yet.' }) : jsonView(t.result, { label: 'Result' })),
      h('section', { class: 'detail-section' },
        h('h3', { text: `Attempt history (${history.length})` }),
        history.length ? timeline(history) : h('p', { class: 'muted', text: 'Not attempted yet.' })));
  }

  async function cancelTask(t, button) {
    const ok = await confirm({
      title: 'Cancel this task?',
      body: [h('p', null, 'Task ', h('span', { class: 'mono', text: t.id }), ` is ${t.status}.`),
        h('p', { text: t.status === 'executing' ? 'Its worker is asked to stop at its next heartbeat; it will not be retried.' : 'It is cancelled at once and never runs.' })],
      action: 'Cancel task', destructive: true,
    });
    if (!ok) return;
    await busy(button, async () => {
      try {
        const res = await api('DELETE', `/queues/${q(t.queue)}/tasks/${q(t.id)}`);
        toast(res.cancel_requested ? 'Cancellation requested: the worker stops at its next heartbeat.' : 'Task cancelled.');
      } catch (err) {
        toast('Could not cancel: ' + err.message, { kind: 'bad' });
      }
    });
    await loadDetail();
    refreshRow(t.queue, t.id);
  }

  async function replayTask(t, button) {
    const ok = await confirm({ title: 'Replay this dead task?', action: 'Replay',
      body: [h('p', { text: 'A new pending task with the same payload is created; this one keeps its history.' })] });
    if (!ok) return;
    await busy(button, async () => {
      try {
        const n = await api('POST', `/queues/${q(t.queue)}/dlq/${q(t.id)}/replay`);
        rememberReplay(t.id, n.id);
        toast('Replayed as a new task ', { nodes: [h('a', { class: 'mono', href: hashLink('tasks', { queue: t.queue, task: n.id }), text: fmt.shortId(n.id) })] });
      } catch (err) {
        toast('Could not replay: ' + err.message, { kind: 'bad' });
      }
    });
    await loadDetail();
  }

  async function refreshRow(queueName, id) {
    const tr = rowsById.get(id);
    if (!tr) return;
    try {
      const t = await api('GET', `/queues/${q(queueName)}/tasks/${q(id)}`);
      const fresh = taskRow(t);
      tr.replaceWith(fresh);
      rowsById.set(id, fresh);
      markSelected();
      selectionChanged();
    } catch { /* the detail shows errors */ }
  }

  function syncForm() {
    fillQueueSelect(queue, queueNames(), params.queue || '');
    status.value = params.status || '';
    worker.value = params.worker || '';
    group.value = params.group || '';
    after.value = fmt.toLocalInput(params.after);
    before.value = fmt.toLocalInput(params.before);
    limit.value = params.limit || '50';
  }

  let listKey = '';
  function route(p) {
    const opened = p.task && p.task !== params.task;
    params = { ...p };
    if (!params.queue && queueNames().length) params.queue = queueNames()[0];
    syncForm();
    const key = JSON.stringify(linkParams());
    if (key !== listKey) { listKey = key; loadPage(false); }
    loadDetail(opened);
  }

  return {
    title: 'Tasks',
    root,
    mount(p) { route(p); },
    route,
    update(snap) {
      fillQueueSelect(queue, snap.queues.map((x) => x.name), queue.value || params.queue || '');
      if (!params.queue && snap.queues.length) route({ ...params, queue: snap.queues[0].name });
    },
    unmount() {},
  };
}

function timeCell(iso) {
  if (!iso) return '—';
  return h('time', { datetime: iso, title: fmt.exact(iso), text: `${fmt.time(iso)} (${fmt.ago(iso)})` });
}

/** runsAllowed is how many attempts the task may have: its retry budget plus the
 * attempts stopping workers released, which do not spend it. */
function runsAllowed(t) { return t.max_retries + 1 + (t.releases || 0); }

/** timeline shows attempts oldest first: outcome, worker, times, error. */
export function timeline(history) {
  return h('ol', { class: 'timeline', id: 'attempts' }, history.map((a) => h('li', { class: ['tl-item', 'st-' + a.status], dataset: { attempt: String(a.attempt), status: a.status } },
    h('span', { class: 'tl-marker', 'aria-hidden': 'true' }),
    h('div', { class: 'tl-body' },
      h('div', { class: 'tl-head' },
        h('strong', { text: `Attempt ${a.attempt}` }), ' ', badge(a.status),
        h('span', { class: 'tl-took muted', text: a.finished_at ? 'took ' + fmt.between(a.started_at, a.finished_at) : 'running for ' + fmt.ago(a.started_at).replace(' ago', '') })),
      h('div', { class: 'tl-meta' },
        h('span', null, 'worker ', h('span', { class: 'mono tl-worker', text: a.worker_id })),
        h('span', null, 'started ', h('time', { datetime: a.started_at, title: fmt.exact(a.started_at), text: fmt.time(a.started_at) })),
        a.finished_at ? h('span', null, 'ended ', h('time', { datetime: a.finished_at, title: fmt.exact(a.finished_at), text: fmt.time(a.finished_at) })) : null),
      a.error ? pre(a.error, 'error-pre tl-error') : null))));
}
