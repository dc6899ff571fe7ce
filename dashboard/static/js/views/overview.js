// Overview: what is wrong, where. Totals, a "needs attention" list, the
// throughput chart and every queue's depth by status, rates and limits, updated
// in place from each snapshot.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import { store } from '../live.js';
import { ThroughputChart } from '../chart.js';
import * as fmt from '../format.js';
import { empty, toast, busy, queueSelect, fillQueueSelect } from '../ui.js';

const depthCols = ['pending', 'claimed', 'executing', 'retry', 'done', 'cancelled'];

export function overview() {
  let chart = null;
  const tiles = {};
  const rows = new Map(); // queue name → {tr, cells}
  let attentionKey = '';

  const tile = (key, label) => {
    const value = h('div', { class: 'tile-value', text: '—' });
    const sub = h('div', { class: 'tile-sub', text: '' });
    const el = h('div', { class: 'tile', dataset: { tile: key } }, h('div', { class: 'tile-label', text: label }), value, sub);
    tiles[key] = { el, value, sub };
    return el;
  };
  const tileRow = h('div', { class: 'tiles' },
    tile('backlog', 'Backlog'), tile('running', 'Running'), tile('throughput', 'Completed / s'),
    tile('errors', 'Worst error rate'), tile('dead', 'Dead letters'), tile('workers', 'Workers'));

  const attention = h('ul', { class: 'attention', id: 'attention' });
  const chartQueue = queueSelect([], '', { all: 'All queues', id: 'chart-queue' });
  const chartBox = h('div', { class: 'chart', id: 'chart' });
  const chartEmpty = h('p', { class: 'chart-note', text: 'Collecting samples…' });
  const tbody = h('tbody');
  const table = h('table', { class: 'grid queues', id: 'queues' },
    h('thead', null, h('tr', null,
      h('th', { scope: 'col', text: 'Queue' }),
      h('th', { scope: 'col', text: 'State' }),
      ...depthCols.map((c) => h('th', { scope: 'col', class: 'num', text: c })),
      h('th', { scope: 'col', class: 'num', text: 'Tasks/s', title: 'Completed per second, last minute' }),
      h('th', { scope: 'col', class: 'num', text: 'Errors', title: 'Share of attempts that failed, last minute' }),
      h('th', { scope: 'col', class: 'num', text: 'Oldest', title: 'Age of the oldest due task not yet running' }),
      h('th', { scope: 'col', class: 'num', text: 'DLQ' }),
      h('th', { scope: 'col', text: 'Limits' }),
      h('th', { scope: 'col', class: 'actions-col' }, h('span', { class: 'sr-only', text: 'Actions' })))),
    tbody);
  const tableWrap = h('div', { class: 'table-wrap' }, table);
  const noQueues = empty('No queues yet.',
    'Create one through the API, e.g. ', h('code', { text: 'curl -X POST localhost:8080/queues -d \'{"name":"emails"}\'' }),
    '; it appears here within a second.');
  const updated = h('span', { class: 'muted small', id: 'updated' });

  const root = h('div', { class: 'view view-overview' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Overview' }), updated),
    tileRow,
    h('div', { class: 'split' },
      h('section', { class: 'card card-chart', 'aria-labelledby': 'chart-title' },
        h('div', { class: 'card-head' },
          h('h2', { class: 'card-title', id: 'chart-title', text: 'Throughput, last minutes' }),
          h('label', { class: 'inline', for: 'chart-queue' }, h('span', { class: 'sr-only', text: 'Queue shown in the chart' }), chartQueue)),
        chartBox, chartEmpty),
      h('section', { class: 'card card-attention', 'aria-labelledby': 'attention-title' },
        h('h2', { class: 'card-title', id: 'attention-title', text: 'Needs attention' }), attention)),
    h('section', { class: 'card', 'aria-labelledby': 'queues-title' },
      h('div', { class: 'card-head' }, h('h2', { class: 'card-title', id: 'queues-title', text: 'Queues' })),
      tableWrap, noQueues));

  chartQueue.addEventListener('change', () => drawChart());

  function drawChart() {
    if (!chart) return;
    chart.update(store.points, chartQueue.value);
    chartBox.dataset.points = String(store.points.length);
    chartEmpty.hidden = store.points.length > 1;
  }

  function row(qs) {
    const cells = {};
    const td = (key, cls) => (cells[key] = h('td', { class: cls, dataset: { col: key } }));
    const name = h('a', { href: hashLink('tasks', { queue: qs.name }), class: 'qname', text: qs.name });
    const pause = h('button', { type: 'button', class: 'btn btn-small', dataset: { action: 'pause' } });
    pause.addEventListener('click', () => togglePause(qs.name, pause));
    const settings = h('a', { class: 'btn btn-small btn-ghost', href: hashLink('settings', { queue: qs.name }), text: 'Settings' });
    settings.setAttribute('aria-label', 'Settings of ' + qs.name);
    const groupsLink = h('a', { class: 'btn btn-small btn-ghost', href: hashLink('groups', { queue: qs.name }), text: 'Groups', hidden: true, dataset: { action: 'groups' } });
    groupsLink.setAttribute('aria-label', 'Groups of ' + qs.name);
    const dlqLink = h('a', { href: hashLink('dlq', { queue: qs.name }) });
    const tr = h('tr', { dataset: { queue: qs.name } },
      h('th', { scope: 'row' }, name),
      td('state'),
      ...depthCols.map((c) => td(c, 'num')),
      td('throughput', 'num'), td('errors', 'num'), td('oldest', 'num'),
      h('td', { class: 'num', dataset: { col: 'dlq' } }, dlqLink),
      td('limits', 'limits'),
      h('td', null, h('div', { class: 'row-actions' }, pause, settings, groupsLink)));
    cells.dlq = dlqLink;
    return { tr, cells, pause, groupsLink };
  }

  function fillRow(r, qs) {
    const c = r.cells;
    replaceIfChanged(c.state, qs.paused ? 'paused' : 'active', () =>
      qs.paused ? h('span', { class: 'badge st-paused', text: 'paused' }) : h('span', { class: 'badge st-active', text: 'active' }));
    for (const col of depthCols) {
      const n = qs.depth[col] || 0;
      setText(c[col], fmt.count(n));
      c[col].classList.toggle('zero', n === 0);
    }
    setText(c.throughput, fmt.rate(qs.throughput_per_sec));
    c.throughput.classList.toggle('zero', !qs.throughput_per_sec);
    setText(c.errors, fmt.percent(qs.error_rate));
    c.errors.classList.toggle('bad', qs.error_rate >= 0.2);
    c.errors.classList.toggle('warn', qs.error_rate >= 0.05 && qs.error_rate < 0.2);
    c.errors.classList.toggle('zero', !qs.error_rate);
    const age = qs.oldest_pending_age_seconds;
    setText(c.oldest, age ? fmt.duration(age) : '—');
    c.oldest.classList.toggle('bad', age >= 300);
    c.oldest.classList.toggle('warn', age >= 60 && age < 300);
    setText(c.dlq, fmt.count(qs.dlq_depth));
    c.dlq.className = qs.dlq_depth > 0 ? 'pill pill-bad' : 'pill pill-zero';
    c.dlq.setAttribute('aria-label', `${qs.dlq_depth} dead tasks in ${qs.name}`);
    setText(c.limits, limits(qs));
    setText(r.pause, qs.paused ? 'Resume' : 'Pause');
    r.pause.dataset.action = qs.paused ? 'resume' : 'pause';
    r.pause.setAttribute('aria-label', (qs.paused ? 'Resume ' : 'Pause ') + qs.name);
    r.tr.classList.toggle('is-paused', qs.paused);
    r.groupsLink.hidden = !qs.fairness;
  }

  async function togglePause(name, button) {
    const paused = button.dataset.action === 'pause';
    await busy(button, async () => {
      try {
        await api('PATCH', `/queues/${q(name)}`, { paused });
        toast(paused ? `Paused ${name}: workers get no new tasks from it.` : `Resumed ${name}.`);
        setText(button, paused ? 'Resume' : 'Pause');
        button.dataset.action = paused ? 'resume' : 'pause';
      } catch (err) {
        toast(`Could not ${paused ? 'pause' : 'resume'} ${name}: ${err.message}`, { kind: 'bad' });
      }
    });
    setText(button, button.dataset.action === 'pause' ? 'Pause' : 'Resume');
  }

  function update(snap) {
    setText(updated, `Updated ${fmt.time(snap.at)} · snapshot ${snap.compute_ms.toFixed(1)} ms`);
    // Totals.
    let backlog = 0, pullBacklog = 0, running = 0, tput = 0, dead = 0, worst = null;
    for (const qs of snap.queues) {
      const waiting = (qs.depth.pending || 0) + (qs.depth.claimed || 0) + (qs.depth.retry || 0);
      backlog += waiting;
      if (!qs.push) pullBacklog += waiting; // push queues need no worker
      running += qs.depth.executing || 0;
      tput += qs.throughput_per_sec;
      dead += qs.dlq_depth;
      if (!worst || qs.error_rate > worst.error_rate) worst = qs;
    }
    const stale = snap.workers.filter((w) => w.stale).length;
    const alive = snap.workers.length - stale;
    setTile('backlog', fmt.count(backlog), 'waiting to run or retry');
    setTile('running', fmt.count(running), 'executing now');
    setTile('throughput', fmt.rate(tput), 'average, last minute');
    setTile('errors', worst && worst.error_rate ? fmt.percent(worst.error_rate) : '0%',
      worst && worst.error_rate ? worst.name : 'no failures, last minute',
      worst && worst.error_rate >= 0.2 ? 'bad' : worst && worst.error_rate >= 0.05 ? 'warn' : '');
    setTile('dead', fmt.count(dead), dead ? 'waiting for replay or discard' : 'nothing dead-lettered', dead ? 'bad' : '');
    setTile('workers', fmt.count(alive), stale ? `alive · ${stale} stale` : 'alive', stale ? 'warn' : (alive === 0 && pullBacklog > 0 ? 'bad' : ''));

    renderAttention(snap, { backlog: pullBacklog, alive });

    // Chart.
    fillQueueSelect(chartQueue, snap.queues.map((x) => x.name), chartQueue.value, 'All queues');
    drawChart();

    // Queue table, keyed by name so focus and hover survive updates.
    const seen = new Set();
    snap.queues.forEach((qs, i) => {
      seen.add(qs.name);
      let r = rows.get(qs.name);
      if (!r) {
        r = row(qs);
        rows.set(qs.name, r);
      }
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] || null);
      fillRow(r, qs);
    });
    for (const [name, r] of rows) {
      if (!seen.has(name)) { r.tr.remove(); rows.delete(name); }
    }
    tableWrap.hidden = snap.queues.length === 0;
    noQueues.hidden = snap.queues.length > 0;
  }

  function setTile(key, value, sub, level = '') {
    const t = tiles[key];
    setText(t.value, value);
    setText(t.sub, sub);
    t.el.classList.toggle('bad', level === 'bad');
    t.el.classList.toggle('warn', level === 'warn');
  }

  function renderAttention(snap, { backlog, alive }) {
    const items = [];
    if (alive === 0 && backlog > 0) {
      items.push({ kind: 'no-worker', level: 'bad', text: `No live worker while ${fmt.count(backlog)} tasks wait.`, href: hashLink('workers'), link: 'Workers' });
    }
    for (const qs of snap.queues) {
      if (qs.dlq_depth > 0) items.push({ kind: 'dlq', level: 'bad', queue: qs.name, text: `${fmt.count(qs.dlq_depth)} dead ${qs.dlq_depth === 1 ? 'task' : 'tasks'}`, href: hashLink('dlq', { queue: qs.name }), link: 'Dead letters' });
      if (qs.error_rate >= 0.05) {
        const retrying = (qs.depth.retry || 0) > 0;
        items.push({ kind: 'errors', level: qs.error_rate >= 0.2 ? 'bad' : 'warn', queue: qs.name, text: `${fmt.percent(qs.error_rate)} of attempts failed in the last minute`,
          href: hashLink('tasks', { queue: qs.name, status: retrying ? 'retry' : 'dead' }), link: retrying ? 'Retrying tasks' : 'Failed tasks' });
      }
      if (qs.oldest_pending_age_seconds >= 60) items.push({ kind: 'oldest', level: qs.oldest_pending_age_seconds >= 300 ? 'bad' : 'warn', queue: qs.name, text: `oldest pending task has waited ${fmt.duration(qs.oldest_pending_age_seconds)}`, href: hashLink('tasks', { queue: qs.name, status: 'pending' }), link: 'Pending tasks' });
      const waiting = (qs.depth.pending || 0) + (qs.depth.retry || 0);
      if (qs.paused && waiting > 0) items.push({ kind: 'paused', level: 'warn', queue: qs.name, text: `paused with ${fmt.count(waiting)} tasks waiting`, href: hashLink('settings', { queue: qs.name }), link: 'Settings' });
    }
    for (const w of snap.workers) {
      if (!w.stale) continue;
      const held = (w.current_tasks || []).length;
      items.push({ kind: 'stale', level: held ? 'bad' : 'warn', worker: w.id, text: `silent for ${fmt.duration((Date.parse(snap.at) - Date.parse(w.last_heartbeat_at)) / 1000)}${held ? `, holding ${held} ${held === 1 ? 'task' : 'tasks'}` : ''}`, href: hashLink('workers'), link: 'Workers' });
    }
    items.sort((a, b) => (a.level === b.level ? 0 : a.level === 'bad' ? -1 : 1));
    const key = JSON.stringify(items.map((i) => [i.kind, i.level, i.queue, i.worker]));
    if (key === attentionKey && items.length) {
      // Same problems: refresh the wording (numbers) in place.
      [...attention.children].forEach((li, i) => setText(li.querySelector('.att-text'), items[i].text));
      return;
    }
    attentionKey = key;
    if (!items.length) {
      replace(attention, h('li', { class: 'att att-ok' }, h('span', { class: 'att-text', text: 'All clear: no dead letters, failures, stuck backlog or stale workers.' })));
      return;
    }
    replace(attention, items.slice(0, 12).map((i) => h('li', { class: ['att', 'att-' + i.level] },
      i.queue ? h('strong', { class: 'att-subject', text: i.queue }) : null,
      i.worker ? h('strong', { class: 'att-subject mono', text: i.worker }) : null,
      h('span', { class: 'att-text', text: i.text }),
      h('a', { class: 'att-link', href: i.href, text: i.link }))));
    if (items.length > 12) attention.append(h('li', { class: 'att muted', text: `and ${items.length - 12} more` }));
  }

  return {
    title: 'Overview',
    root,
    mount() {
      chart = new ThroughputChart(chartBox);
      if (store.snapshot) update(store.snapshot);
    },
    update,
    unmount() { if (chart) chart.destroy(); chart = null; },
  };
}

function limits(qs) {
  const parts = [];
  if (qs.rate_limit) parts.push(`${fmt.rate(qs.rate_limit)}/s, burst ${qs.rate_burst || Math.ceil(qs.rate_limit)}`);
  if (qs.max_concurrency) parts.push(`≤ ${qs.max_concurrency} running`);
  const text = parts.length ? parts.join(' · ') : 'unlimited';
  return qs.push ? `${text} · push → ${qs.push.url}${pushAnswers(qs)}` : text;
}

// pushAnswers lists a push queue's latest answers from its target, newest first.
function pushAnswers(qs) {
  const answers = qs.push_answers || [];
  return answers.length ? ' · last: ' + answers.map((a) => a.answer.replace(/^HTTP /, '')).join(', ') : '';
}

function replaceIfChanged(el, key, build) {
  if (el.dataset.key === key) return;
  el.dataset.key = key;
  replace(el, build());
}
