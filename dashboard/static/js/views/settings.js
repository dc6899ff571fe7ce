// Queue settings: rate limit, burst, concurrency, retries and backoff, retention,
// fairness and each group's default limits, and pause/resume, saved with PATCH
// /queues/:name.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import { store, queueNames, findQueue } from '../live.js';
import * as fmt from '../format.js';
import { empty, toast, busy, field, queueSelect, fillQueueSelect, errorBox } from '../ui.js';

// Each editable field: API name, label, hint, optional (empty = null), integer; a
// field with choices is a select of [value, text] ('' = null).
// A field of a nested object (retention) names its group and key, and shows the
// value divided by scale (hours for milliseconds).
const hourMs = 3600000;
const retentionHint = (status) => `How long ${status} tasks are kept after they finish. Empty: forever.`;
const fields = [
  { name: 'rate_limit', label: 'Rate limit (tasks/s)', hint: 'Empty: unlimited.', optional: true, step: 'any', min: '0' },
  { name: 'rate_burst', label: 'Burst', hint: 'Tasks allowed at once above the rate. Empty: ceil(rate limit).', optional: true, int: true, min: '1' },
  { name: 'max_concurrency', label: 'Max concurrency', hint: 'Tasks executing at once. Empty: unlimited.', optional: true, int: true, min: '1' },
  { name: 'max_retries', label: 'Max retries', hint: 'Retries after the first attempt (0 to 100).', int: true, min: '0', max: '100' },
  { name: 'backoff_base_ms', label: 'Backoff base (ms)', hint: 'Delay before the first retry; doubles each time.', int: true, min: '0' },
  { name: 'backoff_max_ms', label: 'Backoff max (ms)', hint: 'Longest delay between retries.', int: true, min: '1' },
  { name: 'priority_aging_ms', label: 'Priority aging (ms)', hint: 'Waiting this long counts as one priority level. Empty: strict priority.', optional: true, int: true, min: '1', placeholder: 'strict' },
  { name: 'idempotency_window_ms', scale: hourMs, label: 'Idempotency window (hours)', hint: 'How long an idempotency key stays reserved after its task was created, even once the task is deleted (0 to 720).', step: 'any', min: '0', max: '720' },
  { name: 'fairness', label: 'Fairness', hint: 'Round robin: the queue\'s groups (tenants) take weighted turns. One line: priority, then eligible time.', optional: true, choices: [['', 'one line'], ['round_robin', 'round robin by group']] },
  { name: 'group_max_concurrency', label: 'Per group: max concurrency', hint: 'Each group\'s tasks executing at once (a group may set its own). Empty: unlimited.', optional: true, int: true, min: '1' },
  { name: 'group_rate_limit', label: 'Per group: rate limit (tasks/s)', hint: 'Each group\'s token bucket rate. Empty: unlimited.', optional: true, step: 'any', min: '0' },
  { name: 'group_rate_burst', label: 'Per group: burst', hint: 'Each group\'s bucket size. Empty: ceil(per-group rate).', optional: true, int: true, min: '1', placeholder: 'default' },
  { name: 'retention_done', group: 'retention', key: 'done_ms', scale: hourMs, label: 'Keep done (hours)', hint: retentionHint('done'), optional: true, step: 'any', min: '0.0167', placeholder: 'forever' },
  { name: 'retention_cancelled', group: 'retention', key: 'cancelled_ms', scale: hourMs, label: 'Keep cancelled (hours)', hint: retentionHint('cancelled'), optional: true, step: 'any', min: '0.0167', placeholder: 'forever' },
  { name: 'retention_dead', group: 'retention', key: 'dead_ms', scale: hourMs, label: 'Keep dead (hours)', hint: retentionHint('dead'), optional: true, step: 'any', min: '0.0167', placeholder: 'forever' },
];

// valueOf reads field f of queue qs: undefined when the server lacks it.
function valueOf(qs, f) {
  if (!f.group) return qs[f.name];
  const g = qs[f.group];
  return g && typeof g === 'object' && f.key in g ? g[f.key] : undefined;
}

// shown is how a value appears in its input ('' for null).
function shown(f, v) {
  if (v === null || v === undefined) return '';
  return String(f.scale ? Math.round((v / f.scale) * 1e4) / 1e4 : v);
}

export function settings() {
  let name = '';
  let dirty = false;
  let edits = 0; // input events so far: a save's answer keeps what was typed after it was sent
  let base = {}; // the values the form was filled with: PATCH sends only changes
  const queue = queueSelect([], '', { id: 's-queue' });
  const inputs = {};
  const controls = fields.map((f) => {
    if (f.choices) {
      const select = h('select', { id: 's-' + f.name, name: f.name }, f.choices.map(([value, text]) => h('option', { value, text })));
      select.addEventListener('change', () => { dirty = true; edits++; status(); });
      inputs[f.name] = select;
      return field(f.label, select, f.hint);
    }
    const input = h('input', { id: 's-' + f.name, name: f.name, type: 'number', step: f.step || '1', min: f.min, max: f.max, inputmode: f.int ? 'numeric' : 'decimal' });
    if (f.optional) input.placeholder = f.placeholder || (f.name === 'rate_burst' ? 'default' : 'unlimited');
    else input.required = true;
    input.addEventListener('input', () => { dirty = true; edits++; status(); });
    inputs[f.name] = input;
    return field(f.label, input, f.hint);
  });
  const save = h('button', { type: 'submit', class: 'btn btn-primary', id: 'save-settings', text: 'Save changes' });
  const revert = h('button', { type: 'button', class: 'btn btn-ghost', text: 'Revert' });
  const state = h('span', { class: 'muted small', id: 'settings-state' });
  const problem = h('div');
  const form = h('form', { class: 'settings-form', id: 'settings-form', 'aria-label': 'Queue settings', novalidate: true },
    h('div', { class: 'settings-grid' }, controls),
    problem,
    h('div', { class: 'form-actions' }, save, revert, state));

  const pauseState = h('div', { class: 'pause-state' });
  const pause = h('button', { type: 'button', class: 'btn', id: 'pause-toggle' });
  const current = h('dl', { class: 'kv kv-inline' });
  const history = h('dl', { class: 'kv kv-inline', id: 'history-state' });
  const body = h('div', { class: 'settings-body' },
    h('section', { class: 'card pause-card', 'aria-label': 'Pause or resume' }, pauseState, pause),
    h('section', { class: 'card', 'aria-labelledby': 'settings-title' },
      h('h2', { class: 'card-title', id: 'settings-title', text: 'Flow control, retries and retention' }), form),
    h('section', { class: 'card', 'aria-label': 'Current load' }, h('h2', { class: 'card-title', text: 'Now' }), current),
    h('section', { class: 'card', 'aria-label': 'Finished history' }, h('h2', { class: 'card-title', text: 'History and retention' }), history));
  const none = empty('No queues yet.', 'Create one with POST /queues; its settings can be edited here.');
  const missing = h('div', { hidden: true });
  const root = h('div', { class: 'view view-settings' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Queue settings' }),
      h('label', { class: 'inline', for: 's-queue' }, h('span', { class: 'muted', text: 'Queue' }), queue)),
    body, none, missing);

  queue.addEventListener('change', () => { location.hash = hashLink('settings', { queue: queue.value }); });
  revert.addEventListener('click', () => { dirty = false; fill(findQueue(name)); status(); });
  pause.addEventListener('click', () => togglePause());
  form.addEventListener('submit', (e) => { e.preventDefault(); saveChanges(); });

  // fill shows qs's settings in the form and bases the next PATCH on them; with
  // keepInputs, only the base changes (the user typed after the save was sent).
  function fill(qs, keepInputs = false) {
    if (!qs) return;
    base = {};
    for (const f of fields) {
      const v = valueOf(qs, f);
      base[f.name] = v;
      if (!keepInputs) inputs[f.name].value = shown(f, v);
      // A server without this setting does not get it.
      inputs[f.name].closest('.field').hidden = v === undefined;
    }
    replace(problem);
  }

  function status() { setText(state, dirty ? 'Unsaved changes' : 'Saved values shown'); }

  function body_() {
    const out = {};
    for (const f of fields) {
      if (base[f.name] === undefined) continue;
      const raw = inputs[f.name].value.trim();
      if (f.choices) {
        out[f.name] = raw === '' ? null : raw;
        continue;
      }
      if (raw === '') {
        if (!f.optional) throw new Error(`${f.label} is required.`);
        out[f.name] = null;
        continue;
      }
      const n = Number(raw);
      if (!Number.isFinite(n) || (f.int && !Number.isInteger(n))) throw new Error(`${f.label} must be ${f.int ? 'a whole number' : 'a number'}.`);
      // An unedited scaled value keeps its exact base (the input shows it rounded).
      out[f.name] = f.scale ? (raw === shown(f, base[f.name]) ? base[f.name] : Math.round(n * f.scale)) : n;
    }
    for (const k of Object.keys(out)) if (out[k] === base[k]) delete out[k];
    // Grouped fields travel in their object: only the keys changed.
    for (const f of fields) {
      if (!f.group || !(f.name in out)) continue;
      out[f.group] = { ...(out[f.group] || {}), [f.key]: out[f.name] };
      delete out[f.name];
    }
    return out;
  }

  async function saveChanges() {
    let patch;
    try { patch = body_(); } catch (err) { replace(problem, errorBox(err)); return; }
    if (Object.keys(patch).length === 0) {
      dirty = false;
      status();
      toast('Nothing changed.');
      return;
    }
    const sent = edits;
    await busy(save, async () => {
      try {
        const qs = await api('PATCH', `/queues/${q(name)}`, patch);
        dirty = edits !== sent;
        fill(qs, dirty);
        status();
        toast(`Saved ${Object.keys(patch).join(', ')} of ${name}; every replica applies them within a second.`);
      } catch (err) {
        replace(problem, errorBox(err));
      }
    });
  }

  async function togglePause() {
    const qs = findQueue(name);
    const paused = !(pause.dataset.paused === 'true');
    await busy(pause, async () => {
      try {
        const res = await api('PATCH', `/queues/${q(name)}`, { paused });
        showPause(res.paused);
        toast(res.paused ? `Paused ${name}.` : `Resumed ${name}.`);
      } catch (err) {
        toast('Could not change: ' + err.message, { kind: 'bad' });
        if (qs) showPause(qs.paused);
      }
    });
    setText(pause, pause.dataset.paused === 'true' ? 'Resume queue' : 'Pause queue');
  }

  function showPause(paused) {
    pause.dataset.paused = String(paused);
    setText(pause, paused ? 'Resume queue' : 'Pause queue');
    pause.className = paused ? 'btn btn-primary' : 'btn btn-warn';
    replace(pauseState,
      h('span', { class: paused ? 'badge st-paused' : 'badge st-active', text: paused ? 'paused' : 'active' }),
      h('span', { text: paused ? ' Workers get no tasks from this queue; enqueues are still accepted.' : ' Workers receive tasks from this queue.' }));
  }

  function showCurrent(qs) {
    const d = qs.depth;
    replace(current, [
      ['Backlog', fmt.count((d.pending || 0) + (d.claimed || 0) + (d.retry || 0))],
      ['Executing', fmt.count(d.executing || 0)],
      ['Tasks/s', fmt.rate(qs.throughput_per_sec)],
      ['Errors', fmt.percent(qs.error_rate)],
      ['Oldest pending', qs.oldest_pending_age_seconds ? fmt.duration(qs.oldest_pending_age_seconds) : '—'],
      ['Dead', fmt.count(qs.dlq_depth)],
    ].map(([k, v]) => h('div', null, h('dt', { text: k }), h('dd', { text: v }))));
  }

  // showHistory fills the history card from GET /history: each status's day
  // partitions, and this replica's last retention sweep. An admin-only answer: a
  // token without the right sees a note instead.
  async function showHistory() {
    let res;
    try { res = await api('GET', '/history'); } catch (err) {
      replace(history, h('div', null, h('dt', { text: 'History' }), h('dd', { text: 'Not available: ' + err.message })));
      return;
    }
    const rows = res.statuses.map((st) => [`Kept ${st.status}`,
      st.partitions ? `${st.partitions} days since ${st.oldest_day} (~${fmt.count(st.rows_estimate)} tasks)` : 'no days yet']);
    const sw = res.last_sweep;
    rows.push(['Janitor last ran', sw
      ? `${fmt.ago(sw.at)}: ${fmt.count(sw.partitions_dropped)} days dropped (${fmt.count(sw.rows_dropped)} tasks), ${fmt.count(sw.batch_deleted)} deleted in batches${sw.held ? `, ${sw.held} held` : ''}${sw.error ? '; failed: ' + sw.error : ''}`
      : 'not yet on this replica']);
    replace(history, rows.map(([k, v]) => h('div', null, h('dt', { text: k }), h('dd', { text: v }))));
  }

  function update(snap) {
    fillQueueSelect(queue, snap.queues.map((x) => x.name), name);
    if (!name && snap.queues.length) { route({}); return; }
    const qs = findQueue(name);
    none.hidden = snap.queues.length > 0;
    body.hidden = !qs;
    showMissing(!qs && snap.queues.length > 0);
    if (!qs) return;
    if (!dirty) fill(qs);
    if (pause.getAttribute('aria-busy') !== 'true') showPause(qs.paused);
    showCurrent(qs);
  }

  function showMissing(on) {
    missing.hidden = !on;
    if (on) replace(missing, empty(`No queue named ${name}.`, 'It may have been deleted. Pick another queue above.'));
  }

  function route(p) {
    name = p.queue || queueNames()[0] || '';
    dirty = false;
    status();
    fillQueueSelect(queue, queueNames(), name);
    const qs = findQueue(name);
    body.hidden = !qs;
    none.hidden = queueNames().length > 0 || !store.snapshot;
    showMissing(!qs && queueNames().length > 0);
    if (qs) { fill(qs); showPause(qs.paused); showCurrent(qs); }
    showHistory();
  }

  return { title: 'Queue settings', root, mount: route, route, update, unmount() {} };
}
