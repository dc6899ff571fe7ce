// Groups: a fair queue's groups (tenants), busiest first, with their counts and the
// limits in effect. The list comes a page at a time from
// GET /admin/api/queues/:name/groups (busiest first, however many groups the queue
// has: a page reads its own length), "Load more" appends the next; while the live
// feed runs, the rows shown are read again every few seconds, in one request, so
// the order and the counts follow the work. A row's Edit fills the overrides form
// (outside the table, so the live refresh leaves it alone): the group's own weight,
// cap and rate, empty for the queue's default, saved with
// PUT /queues/:name/groups/:group.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import { store } from '../live.js';
import * as fmt from '../format.js';
import { empty, errorBox, busy, field, queueSelect, fillQueueSelect, toast } from '../ui.js';

const pageSize = 50;
const maxPage = 500;       // the most groups one request may ask for
const refreshEvery = 2000; // ms between two background reads of the rows shown
const countCols = ['pending', 'claimed', 'executing', 'retry', 'dead'];
// A group's overrides (PUT /queues/:name/groups/:group); empty sends null, the
// queue's default.
const overrideFields = [
  { name: 'weight', label: 'Weight', int: true, hint: '1–1000 turns per round; empty: 1' },
  { name: 'max_concurrency', label: 'Max concurrency', int: true, hint: 'Executing tasks at once; empty: the queue\'s group default' },
  { name: 'rate_limit', label: 'Rate limit (tasks/s)', int: false, hint: 'Empty: the queue\'s group default' },
  { name: 'rate_burst', label: 'Rate burst', int: true, hint: 'Tasks at once within the rate; empty: the default' },
];

/** fairQueues names the queues of snap whose groups take turns. */
function fairQueues(snap) {
  return snap ? snap.queues.filter((x) => x.fairness).map((x) => x.name) : [];
}

export function groups() {
  let params = {};
  let cursor = null;
  let seq = 0;
  let shownCount = 0;
  let loading = false;
  let lastRead = 0;

  const queue = queueSelect([], '', { id: 'g-queue' });
  const form = h('form', { class: 'filters', id: 'group-filters', role: 'search', 'aria-label': 'Choose a fair queue' },
    field('Queue', queue, 'Fair queues (fairness round_robin) only'));
  queue.addEventListener('change', () => { location.hash = hashLink('groups', { queue: queue.value }); });
  form.addEventListener('submit', (e) => e.preventDefault());

  const defaults = h('p', { class: 'muted small', id: 'group-defaults' });
  const tbody = h('tbody');
  const table = h('table', { class: 'grid groups', id: 'group-list' },
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', text: 'Group' }),
      ...['Pending', 'Claimed', 'Executing', 'Retry', 'Dead'].map((t) => h('th', { scope: 'col', class: 'num', text: t })),
      ...['Weight', 'Max concurrency', 'Rate limit'].map((t) => h('th', { scope: 'col', class: 'num', text: t })),
      h('th', { scope: 'col', text: '' }))),
    tbody);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const state = h('div', { class: 'list-state' });
  const more = h('button', { type: 'button', class: 'btn', id: 'groups-more', text: 'Load more', hidden: true });
  const shown = h('span', { class: 'muted small', id: 'groups-shown' });
  const root = h('div', { class: 'view view-groups' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Groups' }),
      h('span', { class: 'muted small', text: 'Busiest first: pending, claimed and executing tasks' })),
    h('section', { class: 'card' }, form, defaults),
    h('section', { class: 'card', 'aria-label': 'Groups of the queue' }, wrap, state, h('div', { class: 'list-foot' }, shown, more)));
  more.addEventListener('click', () => busy(more, () => load(true)));

  // The overrides form of one group, hidden until a row's Edit.
  let editing = null; // the group being edited
  const inputs = {};
  for (const f of overrideFields) {
    inputs[f.name] = h('input', { id: 'go-' + f.name, name: f.name, type: 'number', step: f.int ? '1' : 'any',
      inputmode: f.int ? 'numeric' : 'decimal', placeholder: 'default' });
  }
  const editTitle = h('h2', { class: 'card-title', id: 'group-edit-title' });
  const editProblem = h('div');
  const saveEdit = h('button', { type: 'submit', class: 'btn btn-primary', id: 'group-save', text: 'Save overrides' });
  const cancelEdit = h('button', { type: 'button', class: 'btn btn-ghost', id: 'group-cancel', text: 'Close' });
  const editForm = h('form', { class: 'settings-form', id: 'group-edit', 'aria-labelledby': 'group-edit-title', novalidate: true },
    h('div', { class: 'settings-grid' }, overrideFields.map((f) => field(f.label, inputs[f.name], f.hint))),
    editProblem, h('div', { class: 'form-actions' }, saveEdit, cancelEdit));
  const editCard = h('section', { class: 'card', id: 'group-edit-card', hidden: true }, editTitle, editForm);
  root.insertBefore(editCard, root.lastChild);
  cancelEdit.addEventListener('click', () => { editing = null; editCard.hidden = true; });
  editForm.addEventListener('submit', (e) => { e.preventDefault(); saveOverrides(); });

  function edit(g) {
    editing = g.group;
    setText(editTitle, `Overrides of group ${g.group}`);
    for (const f of overrideFields) inputs[f.name].value = g[f.name] === null || g[f.name] === undefined ? '' : String(g[f.name]);
    replace(editProblem);
    editCard.hidden = false;
    inputs.weight.focus();
  }

  function overridesBody() {
    const out = {};
    for (const f of overrideFields) {
      const raw = inputs[f.name].value.trim();
      if (raw === '') { out[f.name] = null; continue; }
      const n = Number(raw);
      if (!Number.isFinite(n) || (f.int && !Number.isInteger(n))) throw new Error(`${f.label} must be ${f.int ? 'a whole number' : 'a number'}.`);
      out[f.name] = n;
    }
    return out;
  }

  async function saveOverrides() {
    if (!editing || !params.queue) return;
    let body;
    try { body = overridesBody(); } catch (err) { replace(editProblem, errorBox(err)); return; }
    const group = editing;
    const queueName = params.queue;
    await busy(saveEdit, async () => {
      try {
        await api('PUT', `/queues/${q(queueName)}/groups/${q(group)}`, body);
        replace(editProblem);
        toast(`Saved the overrides of ${group} in ${queueName}; every replica applies them at its next pop.`);
        load(false, true);
      } catch (err) {
        replace(editProblem, errorBox(err));
      }
    });
  }

  // load reads the first page (append false), the next one (append true), or, with
  // refresh, the rows shown again from the start in one request.
  async function load(append, refresh = false) {
    if (!params.queue) return;
    const my = ++seq;
    loading = true;
    lastRead = Date.now();
    const limit = refresh ? Math.min(maxPage, Math.max(pageSize, shownCount)) : pageSize;
    const s = new URLSearchParams({ limit: String(limit) });
    if (append && cursor) s.set('cursor', cursor);
    if (!append && !refresh) replace(state, h('p', { class: 'muted', text: 'Loading…' }));
    try {
      const data = await api('GET', `/admin/api/queues/${q(params.queue)}/groups?${s}`);
      if (my !== seq) return;
      const rows = data.groups.map(row);
      if (append) tbody.append(...rows);
      else replace(tbody, ...rows);
      shownCount = append ? shownCount + rows.length : rows.length;
      cursor = data.next_cursor;
      showState();
    } catch (err) {
      if (my !== seq || refresh) return; // a failed background read: the next one tries again
      wrap.hidden = shownCount === 0;
      replace(state, errorBox(err));
    } finally {
      if (my === seq) loading = false;
    }
  }

  function showState() {
    more.hidden = !cursor;
    wrap.hidden = shownCount === 0;
    setText(shown, shownCount ? `${fmt.count(shownCount)} ${shownCount === 1 ? 'group' : 'groups'} shown${cursor ? ', more available' : ''}` : '');
    replace(state, shownCount ? null : empty(`No group of ${params.queue} has tasks.`,
      'A task names its group at the enqueue ("group": "acme"); its group shows here while it has unfinished or dead tasks.'));
  }

  function row(g) {
    const e = g.effective;
    const limit = (value, override, text) => h('td', { class: ['num', override !== null ? 'override' : null],
      title: override !== null ? 'This group\'s own setting' : 'The queue\'s default', text });
    return h('tr', { dataset: { group: g.group } },
      h('th', { scope: 'row' }, h('span', { class: 'mono clip', text: g.group, title: g.group })),
      ...countCols.map((c) => h('td', { class: ['num', g[c] ? null : 'zero'], dataset: { col: c }, text: fmt.count(g[c]) })),
      limit(e.weight, g.weight, String(e.weight)),
      limit(e.max_concurrency, g.max_concurrency, e.max_concurrency === null ? '—' : fmt.count(e.max_concurrency)),
      limit(e.rate_limit, g.rate_limit ?? g.rate_burst, e.rate_limit === null ? '—' : `${e.rate_limit}/s, burst ${e.rate_burst}`),
      h('td', null, h('button', { type: 'button', class: 'btn btn-small', dataset: { action: 'edit' }, text: 'Edit',
        'aria-label': `Edit the overrides of ${g.group}`, onclick: () => edit(g) })));
  }

  function showDefaults(snap) {
    const qs = snap && snap.queues.find((x) => x.name === params.queue);
    if (!qs) { setText(defaults, ''); return; }
    if (!qs.fairness) {
      setText(defaults, `${qs.name} is not a fair queue: its tasks wait in one line. Set its fairness to round_robin for its groups to take turns.`);
      return;
    }
    const parts = [`Groups take turns (${qs.fairness})`];
    parts.push(qs.group_max_concurrency ? `at most ${fmt.count(qs.group_max_concurrency)} executing each` : 'no cap per group');
    parts.push(qs.group_rate_limit ? `${qs.group_rate_limit}/s each${qs.group_rate_burst ? `, burst ${qs.group_rate_burst}` : ''}` : 'no rate per group');
    setText(defaults, parts.join(' · ') + '. Marked values are a group\'s own.');
  }

  function route(p) {
    params = { ...p };
    const names = fairQueues(store.snapshot);
    if (!params.queue && names.length) params.queue = names[0];
    fillQueueSelect(queue, names, params.queue || '');
    showDefaults(store.snapshot);
    cursor = null;
    shownCount = 0;
    editing = null;
    editCard.hidden = true;
    replace(tbody);
    if (params.queue) load(false);
    else {
      wrap.hidden = true;
      setText(shown, '');
      replace(state, empty('No fair queue yet.', 'A queue whose fairness is round_robin lets its groups (tenants) take turns; its groups show here.'));
    }
  }

  return {
    title: 'Groups',
    root,
    mount: route,
    route,
    update(snap) {
      const names = fairQueues(snap);
      if (!params.queue && names.length) { route({ queue: names[0] }); return; }
      fillQueueSelect(queue, names, params.queue || '');
      showDefaults(snap);
      if (params.queue && !loading && Date.now() - lastRead >= refreshEvery) load(false, true);
    },
    unmount() { seq++; },
  };
}
