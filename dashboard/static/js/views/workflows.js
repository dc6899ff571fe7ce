// Workflows: the list of workflows (GET /workflows), and one workflow drawn as a
// graph (GET /workflows/:id), layered by depth, each step coloured by its status
// and linked to its task, with cancel (DELETE /workflows/:id). Workflows are not in
// the live feed: the panel refetches every two seconds while it is open.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import * as fmt from '../format.js';
import { empty, toast, busy, errorBox, badge, confirm } from '../ui.js';

const REFRESH_MS = 2000;
const SVG = 'http://www.w3.org/2000/svg';
const NODE_W = 150;
const NODE_H = 34;
const GAP_X = 56;
const GAP_Y = 14;
const PAD = 12;

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

function statusClass(status) {
  return 's-' + String(status || 'gone').replace(/[^a-z_]/g, '');
}

/** layers groups steps by depth: 0 without dependencies, else 1 + the deepest dependency. */
function layers(steps) {
  const byName = new Map(steps.map((s) => [s.step, s]));
  const depth = new Map();
  const depthOf = (name) => {
    if (depth.has(name)) return depth.get(name);
    depth.set(name, 0); // cycles cannot be submitted; this only guards the recursion
    const s = byName.get(name);
    const d = s && s.depends_on.length ? 1 + Math.max(...s.depends_on.map(depthOf)) : 0;
    depth.set(name, d);
    return d;
  };
  const out = [];
  for (const s of steps) {
    const d = depthOf(s.step);
    (out[d] = out[d] || []).push(s);
  }
  return out;
}

/** graph draws the workflow left to right, one column per depth. */
function graph(wf) {
  const cols = layers(wf.steps);
  const pos = new Map();
  let height = 0;
  cols.forEach((col, x) => {
    col.forEach((s, y) => pos.set(s.step, { x: PAD + x * (NODE_W + GAP_X), y: PAD + y * (NODE_H + GAP_Y) }));
    height = Math.max(height, col.length);
  });
  const width = PAD * 2 + cols.length * NODE_W + (cols.length - 1) * GAP_X;
  const h2 = PAD * 2 + height * NODE_H + Math.max(0, height - 1) * GAP_Y;
  const root = svg('svg', { id: 'wf-graph', class: 'wf-graph', width, height: h2, viewBox: `0 0 ${width} ${h2}`,
    role: 'img', 'aria-label': `Graph of ${wf.steps.length} steps` });
  const edges = svg('g', { class: 'wf-edges' });
  root.append(edges);
  for (const s of wf.steps) {
    const to = pos.get(s.step);
    for (const dep of s.depends_on) {
      const from = pos.get(dep);
      if (!from) continue;
      const x1 = from.x + NODE_W, y1 = from.y + NODE_H / 2, x2 = to.x, y2 = to.y + NODE_H / 2;
      const mid = (x1 + x2) / 2;
      edges.append(svg('path', { class: 'wf-edge', d: `M${x1},${y1} C${mid},${y1} ${mid},${y2} ${x2},${y2}` }));
    }
  }
  for (const s of wf.steps) {
    const p = pos.get(s.step);
    const label = s.step.length > 18 ? s.step.slice(0, 17) + '…' : s.step;
    const node = svg('g', { class: `wf-node ${statusClass(s.status)}`, 'data-step': s.step, tabindex: 0,
      transform: `translate(${p.x},${p.y})`, role: 'link', 'aria-label': `${s.step}: ${s.status || 'gone'}` },
    svg('title', {}, `${s.step} · ${s.status || 'task gone'}${s.last_error ? ' · ' + s.last_error : ''}`),
    svg('rect', { width: NODE_W, height: NODE_H, rx: 7 }),
    svg('text', { x: 10, y: 15, class: 'wf-name' }, label),
    svg('text', { x: 10, y: 28, class: 'wf-status' }, s.status || 'gone'));
    if (s.queue) {
      const go = () => { location.hash = hashLink('tasks', { queue: s.queue, task: s.task_id }); };
      node.addEventListener('click', go);
      node.addEventListener('keydown', (e) => { if (e.key === 'Enter') go(); });
    }
    root.append(node);
  }
  return root;
}

function counts(wf) {
  const done = wf.steps.filter((s) => s.status === 'done').length;
  return `${done}/${wf.steps.length}`;
}

export function workflows() {
  const problem = h('div');
  const body = h('div');
  const title = h('h1', { text: 'Workflows' });
  const summary = h('span', { class: 'muted small', id: 'workflow-summary' });
  const root = h('div', { class: 'view view-workflows' },
    h('div', { class: 'view-head' }, title, summary), problem, body);
  let timer = null;
  let loading = false;
  let selected = null; // workflow id shown, or null for the list

  async function load() {
    if (loading) return;
    loading = true;
    try {
      if (selected) renderOne(await api('GET', '/workflows/' + q(selected)));
      else renderList((await api('GET', '/workflows?limit=25')).workflows || []);
      replace(problem);
    } catch (err) {
      replace(problem, errorBox(err));
    } finally {
      loading = false;
    }
  }

  function renderList(list) {
    setText(title, 'Workflows');
    const running = list.filter((w) => w.status === 'running').length;
    setText(summary, list.length ? `${list.length} shown, ${running} running` : '');
    if (!list.length) {
      replace(body, h('section', { class: 'card' },
        empty('No workflows yet.', 'Submit one with POST /workflows or taskforge workflow submit; it appears here.')));
      return;
    }
    const rows = list.map((w) => h('tr', { dataset: { workflow: w.id } },
      h('th', { scope: 'row', class: 'wrap-anywhere' },
        h('a', { href: hashLink('workflows', { id: w.id }), text: w.name || fmt.shortId(w.id), title: w.id })),
      h('td', { dataset: { col: 'status' } }, badge(w.status)),
      h('td', { dataset: { col: 'done' }, text: counts(w) }),
      h('td', { title: fmt.exact(w.created_at), text: fmt.time(w.created_at) }),
      h('td', { title: fmt.exact(w.finished_at), text: w.finished_at ? fmt.time(w.finished_at) : '—' })));
    replace(body, h('section', { class: 'card' }, h('div', { class: 'table-wrap' },
      h('table', { class: 'grid', id: 'workflow-list' },
        h('thead', null, h('tr', null, ...['Workflow', 'Status', 'Steps done', 'Created', 'Finished'].map((t) => h('th', { scope: 'col', text: t })))),
        h('tbody', null, rows)))));
  }

  function renderOne(wf) {
    setText(title, wf.name ? `Workflow ${wf.name}` : 'Workflow');
    setText(summary, `${counts(wf)} steps done`);
    const cancel = h('button', { type: 'button', class: 'btn btn-danger', id: 'workflow-cancel', text: 'Cancel workflow',
      disabled: wf.status !== 'running' });
    cancel.addEventListener('click', () => busy(cancel, async () => {
      const ok = await confirm({ title: 'Cancel this workflow?', destructive: true, action: 'Cancel workflow',
        body: ['Every unfinished step is cancelled; executing steps are asked to stop.'] });
      if (!ok) return;
      try {
        await api('DELETE', '/workflows/' + q(wf.id));
        toast('Workflow cancelled');
      } catch (err) {
        toast(`Could not cancel: ${err.message}`, { kind: 'bad' });
      }
      await load();
    }));
    const steps = wf.steps.map((s) => h('tr', { dataset: { step: s.step } },
      h('th', { scope: 'row', class: 'wrap-anywhere', text: s.step }),
      h('td', { dataset: { col: 'status' } }, badge(s.status || 'gone')),
      h('td', { text: s.depends_on.join(', ') || '—' }),
      h('td', { text: s.attempts ?? '—' }),
      h('td', null, s.queue
        ? h('a', { class: 'chip mono', href: hashLink('tasks', { queue: s.queue, task: s.task_id }), title: s.task_id, text: fmt.shortId(s.task_id) })
        : h('span', { class: 'muted', text: '—' })),
      h('td', { class: 'wrap-anywhere small', text: s.last_error || '' })));
    replace(body,
      h('section', { class: 'card' },
        h('div', { class: 'wf-head' },
          h('a', { href: hashLink('workflows'), text: '← All workflows' }), ' ',
          badge(wf.status), h('span', { class: 'muted small mono', text: ' ' + wf.id }), ' ', cancel),
        h('div', { class: 'wf-graph-wrap' }, graph(wf))),
      h('section', { class: 'card' }, h('div', { class: 'table-wrap' },
        h('table', { class: 'grid', id: 'workflow-steps' },
          h('thead', null, h('tr', null, ...['Step', 'Status', 'Depends on', 'Attempts', 'Task', 'Last error'].map((t) => h('th', { scope: 'col', text: t })))),
          h('tbody', null, steps)))));
  }

  function show(params) {
    selected = params.id || null;
    replace(body);
    load();
  }

  return {
    title: 'Workflows',
    root,
    mount(params) { show(params); timer = setInterval(load, REFRESH_MS); },
    route(params) { show(params); },
    update() {},
    unmount() { clearInterval(timer); },
  };
}
