// Workers: every worker with its queues, last heartbeat and current tasks; stale
// ones (silent longer than the server's threshold) first and highlighted.
import { h, replace, setText, hashLink } from '../dom.js';
import { store } from '../live.js';
import * as fmt from '../format.js';
import { empty } from '../ui.js';

export function workers() {
  const tbody = h('tbody');
  const table = h('table', { class: 'grid workers', id: 'worker-list' },
    h('thead', null, h('tr', null,
      ...['Worker', 'Status', 'Last heartbeat', 'Queues', 'Current tasks'].map((t) => h('th', { scope: 'col', text: t })))),
    tbody);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const none = empty('No worker has polled yet.', 'Workers appear here after their first poll or heartbeat.');
  const summary = h('span', { class: 'muted small', id: 'worker-summary' });
  const root = h('div', { class: 'view view-workers' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Workers' }), summary),
    h('section', { class: 'card' }, wrap, none));
  const rows = new Map(); // id → {tr, key, beat}

  function update(snap) {
    const now = Date.parse(snap.at);
    const list = [...snap.workers].sort((a, b) => (a.stale === b.stale ? a.id.localeCompare(b.id) : a.stale ? -1 : 1));
    const stale = list.filter((w) => w.stale).length;
    setText(summary, list.length ? `${list.length} ${list.length === 1 ? 'worker' : 'workers'}, ${list.length - stale} alive, ${stale} stale (silent over ${fmt.duration(snap.stale_after_seconds)})` : '');
    const seen = new Set();
    list.forEach((w, i) => {
      seen.add(w.id);
      const key = JSON.stringify([w.stale, w.queues, w.current_tasks]);
      let r = rows.get(w.id);
      if (!r || r.key !== key) {
        const fresh = row(w);
        fresh.key = key;
        if (r) r.tr.replaceWith(fresh.tr);
        r = fresh;
        rows.set(w.id, r);
      }
      if (tbody.children[i] !== r.tr) tbody.insertBefore(r.tr, tbody.children[i] || null);
      setText(r.beat, fmt.ago(w.last_heartbeat_at, now));
      r.beat.title = fmt.exact(w.last_heartbeat_at);
    });
    for (const [id, r] of rows) if (!seen.has(id)) { r.tr.remove(); rows.delete(id); }
    wrap.hidden = list.length === 0;
    none.hidden = list.length > 0;
  }

  function row(w) {
    const beat = h('span');
    const tasks = w.current_tasks || [];
    const tr = h('tr', { class: w.stale ? 'stale' : null, dataset: { worker: w.id } },
      h('th', { scope: 'row', class: 'mono wrap-anywhere', text: w.id }),
      h('td', null, w.stale ? h('span', { class: 'badge st-stale', text: 'stale' }) : h('span', { class: 'badge st-alive', text: 'alive' })),
      h('td', null, beat),
      h('td', null, (w.queues || []).map((name) => h('a', { class: 'chip', href: hashLink('tasks', { queue: name, worker: w.id }), text: name }))),
      h('td', null, tasks.length ? tasks.map((id) => h('a', { class: 'chip mono', href: hashLink('tasks', { queue: (w.queues || [])[0], task: id }), title: id, text: fmt.shortId(id) })) : h('span', { class: 'muted', text: 'idle' })));
    return { tr, beat };
  }

  return {
    title: 'Workers',
    root,
    mount() { if (store.snapshot) update(store.snapshot); },
    route() {},
    update,
    unmount() {},
  };
}
