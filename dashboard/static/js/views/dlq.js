// Dead-letter browser: a queue's dead tasks, filtered by time of death; replay
// one, several or all (after a confirmation) and follow the link to the new task;
// discard one or several for good.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import { queueNames, findQueue } from '../live.js';
import * as fmt from '../format.js';
import { empty, errorBox, toast, confirm, busy, field, queueSelect, fillQueueSelect } from '../ui.js';
import { rememberReplay, replayedAs } from '../replays.js';

export function dlq() {
  let params = {};
  let cursor = null;
  let seq = 0;
  const rows = new Map(); // id → {tr, task, check, replays}

  const queue = queueSelect([], '', { id: 'd-queue' });
  const after = h('input', { id: 'd-after', type: 'datetime-local', step: '1' });
  const before = h('input', { id: 'd-before', type: 'datetime-local', step: '1' });
  const form = h('form', { class: 'filters', id: 'dlq-filters', role: 'search', 'aria-label': 'Filter dead tasks' },
    field('Queue', queue), field('Died after', after), field('Died before', before),
    h('div', { class: 'filter-actions' }, h('button', { type: 'submit', class: 'btn btn-primary', text: 'Apply' })));
  queue.addEventListener('change', () => form.requestSubmit());

  const all = h('input', { type: 'checkbox', id: 'dlq-all', 'aria-label': 'Select all shown' });
  const tbody = h('tbody');
  const table = h('table', { class: 'grid dlq', id: 'dlq-list' },
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', class: 'check' }, all),
      ...['Task', 'Died', 'Attempts', 'Last error', 'Replays'].map((t) => h('th', { scope: 'col', class: t === 'Attempts' ? 'num' : null, text: t })),
      h('th', { scope: 'col' }, h('span', { class: 'sr-only', text: 'Actions' })))),
    tbody);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const state = h('div', { class: 'list-state' });
  const selCount = h('span', { class: 'sel-count', id: 'dlq-selected', text: 'None selected' });
  const replaySel = h('button', { type: 'button', class: 'btn btn-primary', id: 'replay-selected', text: 'Replay selected', disabled: true });
  const replayAll = h('button', { type: 'button', class: 'btn', id: 'replay-all', text: 'Replay all in queue' });
  const discardSel = h('button', { type: 'button', class: 'btn btn-ghost-danger', id: 'discard-selected', text: 'Discard selected', disabled: true });
  const more = h('button', { type: 'button', class: 'btn', text: 'Load more', hidden: true });
  const summary = h('span', { class: 'muted small' });

  const root = h('div', { class: 'view view-dlq' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Dead letters' }), summary),
    h('section', { class: 'card' }, form),
    h('section', { class: 'card', 'aria-label': 'Dead tasks' },
      h('div', { class: 'bulk-bar' }, selCount, replaySel, replayAll, discardSel),
      wrap, state, h('div', { class: 'list-foot' }, more)));

  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const fragment = hashLink('dlq', { queue: queue.value, after: fmt.fromLocalInput(after.value), before: fmt.fromLocalInput(before.value) });
    if (location.hash === fragment) load(false);
    else location.hash = fragment;
  });
  all.addEventListener('change', () => {
    for (const r of rows.values()) if (!r.check.disabled) r.check.checked = all.checked;
    selectionChanged();
  });
  replaySel.addEventListener('click', () => replaySelected());
  replayAll.addEventListener('click', () => replayEverything());
  discardSel.addEventListener('click', () => discardSelected());
  more.addEventListener('click', () => busy(more, () => load(true)));

  function selected() { return [...rows.values()].filter((r) => r.check.checked); }

  function selectionChanged() {
    const n = selected().length;
    setText(selCount, n ? `${n} selected` : 'None selected');
    replaySel.disabled = n === 0;
    setText(replaySel, n ? `Replay selected (${n})` : 'Replay selected');
    discardSel.disabled = n === 0;
    setText(discardSel, n ? `Discard selected (${n})` : 'Discard selected');
    all.checked = n > 0 && n === rows.size;
    all.indeterminate = n > 0 && n < rows.size;
  }

  async function load(append) {
    const my = ++seq;
    if (!params.queue) {
      wrap.hidden = true;
      replace(state, empty('No queue yet.', 'Dead tasks appear here when tasks exhaust their retries.'));
      return;
    }
    if (!append) { cursor = null; rows.clear(); }
    const s = new URLSearchParams({ limit: '100' });
    if (params.after) s.set('died_after', params.after);
    if (params.before) s.set('died_before', params.before);
    if (cursor) s.set('cursor', cursor);
    replace(state, append ? null : h('p', { class: 'muted', text: 'Loading…' }));
    try {
      const data = await api('GET', `/admin/api/queues/${q(params.queue)}/dlq?${s}`);
      if (my !== seq) return;
      if (!append) replace(tbody);
      for (const t of data.tasks) {
        const r = row(t);
        rows.set(t.id, r);
        tbody.append(r.tr);
      }
      cursor = data.next_cursor;
      more.hidden = !cursor;
      wrap.hidden = rows.size === 0;
      replace(state, rows.size ? null : empty(params.after || params.before ? 'No task died in this time range.' : `Nothing dead-lettered in ${params.queue}.`,
        'Tasks land here when they fail more often than their retry budget allows, or fail with retryable: false.'));
      selectionChanged();
      updateSummary();
    } catch (err) {
      if (my !== seq) return;
      replace(state, errorBox(err));
    }
  }

  function row(t) {
    const check = h('input', { type: 'checkbox', 'aria-label': 'Select task ' + t.id });
    check.addEventListener('change', selectionChanged);
    const replays = h('td', { class: 'replays' });
    const replay = h('button', { type: 'button', class: 'btn btn-small btn-primary', dataset: { action: 'replay' }, text: 'Replay' });
    const discard = h('button', { type: 'button', class: 'btn btn-small btn-ghost-danger', dataset: { action: 'discard' }, text: 'Discard' });
    replay.setAttribute('aria-label', 'Replay task ' + t.id);
    discard.setAttribute('aria-label', 'Discard task ' + t.id);
    const tr = h('tr', { dataset: { task: t.id } },
      h('td', { class: 'check' }, check),
      h('td', null, h('a', { class: 'mono', href: hashLink('tasks', { queue: t.queue, task: t.id }), text: fmt.shortId(t.id), title: t.id })),
      h('td', { text: fmt.time(t.died_at), title: fmt.exact(t.died_at) }),
      h('td', { class: 'num', text: String(t.attempts) }),
      h('td', { class: 'clip error-text', text: t.last_error || '—', title: t.last_error || '' }),
      replays,
      h('td', null, h('div', { class: 'row-actions' }, replay, discard)));
    const r = { tr, task: t, check, replays };
    fillReplays(r);
    replay.addEventListener('click', () => replayOne(r, replay));
    discard.addEventListener('click', () => discardOne(r, discard));
    return r;
  }

  function fillReplays(r) {
    const t = r.task;
    const newId = replayedAs(t.id);
    replace(r.replays,
      h('span', { class: t.replay_count ? 'replay-count' : 'muted', text: t.replay_count ? `${t.replay_count}×` : 'never' }),
      t.replay_count && t.replayed_at ? h('span', { class: 'muted small', text: ' last ' + fmt.ago(t.replayed_at) }) : null,
      newId ? [' → ', h('a', { class: 'mono new-task', href: hashLink('tasks', { queue: t.queue, task: newId }), text: fmt.shortId(newId), title: 'The new task ' + newId })] : null);
  }

  function replayed(r, newTask) {
    rememberReplay(r.task.id, newTask.id);
    r.task.replay_count += 1;
    r.task.replayed_at = new Date().toISOString();
    r.check.checked = false;
    fillReplays(r);
  }

  async function replayOne(r, button) {
    const ok = await confirm({ title: 'Replay this task?', action: 'Replay',
      body: [h('p', null, 'A new pending task with the payload of ', h('span', { class: 'mono', text: r.task.id }), ' is created. The dead task stays here with its history.')] });
    if (!ok) return;
    await busy(button, async () => {
      try {
        const n = await api('POST', `/queues/${q(r.task.queue)}/dlq/${q(r.task.id)}/replay`);
        replayed(r, n);
        toast('Replayed as ', { nodes: [h('a', { class: 'mono', href: hashLink('tasks', { queue: n.queue, task: n.id }), text: fmt.shortId(n.id) })] });
      } catch (err) {
        toast('Could not replay: ' + err.message, { kind: 'bad' });
      }
    });
    selectionChanged();
  }

  async function replaySelected() {
    const sel = selected();
    if (!sel.length) return;
    const ok = await confirm({ title: `Replay ${sel.length} dead ${sel.length === 1 ? 'task' : 'tasks'}?`, action: `Replay ${sel.length}`,
      body: [h('p', { text: `${sel.length} new pending tasks are created in ${params.queue}, in one transaction. The dead tasks stay here.` })] });
    if (!ok) return;
    await busy(replaySel, async () => {
      try {
        const res = await api('POST', `/queues/${q(params.queue)}/dlq/replay`, { ids: sel.map((r) => r.task.id) });
        res.replayed.forEach((n, i) => replayed(sel[i], n));
        toast(`Replayed ${res.replayed.length} ${res.replayed.length === 1 ? 'task' : 'tasks'}.`);
      } catch (err) {
        toast('Could not replay: ' + err.message, { kind: 'bad' });
      }
    });
    selectionChanged();
  }

  async function replayEverything() {
    const qs = findQueue(params.queue);
    const n = qs ? qs.dlq_depth : rows.size;
    if (!n) { toast(`Nothing to replay in ${params.queue}.`); return; }
    const ok = await confirm({ title: `Replay all ${fmt.count(n)} dead tasks of ${params.queue}?`, action: `Replay all ${fmt.count(n)}`, destructive: true,
      body: [h('p', { text: 'Every dead task of the queue is replayed, including those outside the current filter. Make sure the cause of the failures is fixed first.' })] });
    if (!ok) return;
    await busy(replayAll, async () => {
      try {
        const res = await api('POST', `/queues/${q(params.queue)}/dlq/replay`, { all: true });
        for (const nt of res.replayed) {
          const r = rows.get(nt.replayed_from);
          if (r) replayed(r, nt);
          else rememberReplay(nt.replayed_from, nt.id);
        }
        toast(`Replayed ${fmt.count(res.replayed.length)} tasks.`);
      } catch (err) {
        toast('Could not replay: ' + err.message, { kind: 'bad' });
      }
    });
    selectionChanged();
  }

  async function discardOne(r, button) {
    const ok = await confirm({ title: 'Discard this dead task?', action: 'Discard', destructive: true,
      body: [h('p', null, 'Task ', h('span', { class: 'mono', text: r.task.id }), ' and its attempt history are deleted for good.')] });
    if (!ok) return;
    await busy(button, async () => {
      try {
        await api('DELETE', `/queues/${q(r.task.queue)}/dlq/${q(r.task.id)}`);
        r.tr.remove();
        rows.delete(r.task.id);
        toast('Discarded.');
        if (!rows.size) load(false);
      } catch (err) {
        toast('Could not discard: ' + err.message, { kind: 'bad' });
      }
    });
    selectionChanged();
  }

  async function discardSelected() {
    const sel = selected();
    if (!sel.length) return;
    const ok = await confirm({ title: `Discard ${sel.length} dead ${sel.length === 1 ? 'task' : 'tasks'}?`, action: `Discard ${sel.length}`, destructive: true,
      body: [h('p', { text: `The selected dead tasks of ${params.queue} and their attempt histories are deleted for good.` })] });
    if (!ok) return;
    await busy(discardSel, async () => {
      try {
        const res = await api('DELETE', `/queues/${q(params.queue)}/dlq`, { ids: sel.map((r) => r.task.id) });
        for (const r of sel) {
          r.tr.remove();
          rows.delete(r.task.id);
        }
        toast(`Discarded ${res.discarded} ${res.discarded === 1 ? 'task' : 'tasks'}.`);
        if (!rows.size) load(false);
      } catch (err) {
        toast('Could not discard: ' + err.message, { kind: 'bad' });
      }
    });
    selectionChanged();
  }

  function updateSummary() {
    const qs = findQueue(params.queue);
    setText(summary, qs ? `${fmt.count(qs.dlq_depth)} dead in ${qs.name}` : '');
    replayAll.disabled = !qs || qs.dlq_depth === 0;
  }

  function route(p) {
    params = { ...p };
    if (!params.queue) {
      const names = queueNames();
      // Start with the queue that has the most dead tasks.
      const worst = names.map(findQueue).filter(Boolean).sort((a, b) => b.dlq_depth - a.dlq_depth)[0];
      params.queue = worst ? worst.name : '';
    }
    fillQueueSelect(queue, queueNames(), params.queue);
    after.value = fmt.toLocalInput(params.after);
    before.value = fmt.toLocalInput(params.before);
    load(false);
  }

  return {
    title: 'Dead letters',
    root,
    mount: route,
    route,
    update(snap) {
      fillQueueSelect(queue, snap.queues.map((x) => x.name), queue.value || params.queue);
      if (!params.queue && snap.queues.length) { route(params); return; }
      updateSummary();
    },
    unmount() {},
  };
}
