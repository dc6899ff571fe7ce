// Schedules: every cron schedule with its cadence, next and last runs and last task;
// pause / resume (PATCH /schedules/:name) and "run now" (POST /schedules/:name/trigger).
// Schedules are not in the live feed: the list is fetched on mount, after every
// action and every few seconds while the panel is open.
import { h, replace, setText, hashLink } from '../dom.js';
import { api, q } from '../api.js';
import * as fmt from '../format.js';
import { empty, toast, busy, errorBox, badge } from '../ui.js';

const REFRESH_MS = 5000;

export function schedules() {
  const tbody = h('tbody');
  const table = h('table', { class: 'grid schedules', id: 'schedule-list' },
    h('thead', null, h('tr', null,
      ...['Schedule', 'Queue', 'Cron', 'State', 'Next run', 'Last run', 'Last task', ''].map((t) => h('th', { scope: 'col', text: t })))),
    tbody);
  const wrap = h('div', { class: 'table-wrap' }, table);
  const none = empty('No schedules yet.', 'Create one with POST /schedules or taskforge schedule create; it appears here.');
  const problem = h('div');
  const summary = h('span', { class: 'muted small', id: 'schedule-summary' });
  const root = h('div', { class: 'view view-schedules' },
    h('div', { class: 'view-head' }, h('h1', { text: 'Schedules' }), summary),
    problem,
    h('section', { class: 'card' }, wrap, none));
  let timer = null;
  let loading = false;

  async function load() {
    if (loading) return;
    loading = true;
    try {
      const data = await api('GET', '/schedules');
      replace(problem);
      render(data.schedules || []);
    } catch (err) {
      replace(problem, errorBox(err));
    } finally {
      loading = false;
    }
  }

  function render(list) {
    const paused = list.filter((s) => s.paused).length;
    setText(summary, list.length ? `${list.length} ${list.length === 1 ? 'schedule' : 'schedules'}, ${paused} paused` : '');
    replace(tbody, list.map(row));
    wrap.hidden = list.length === 0;
    none.hidden = list.length > 0;
  }

  function row(s) {
    const toggle = h('button', { type: 'button', class: 'btn btn-small', dataset: { action: s.paused ? 'resume' : 'pause' }, text: s.paused ? 'Resume' : 'Pause' });
    const run = h('button', { type: 'button', class: 'btn btn-small', dataset: { action: 'run' }, text: 'Run now' });
    toggle.addEventListener('click', () => busy(toggle, async () => {
      try {
        await api('PATCH', '/schedules/' + q(s.name), { paused: !s.paused });
        toast(`Schedule ${s.name} ${s.paused ? 'resumed: it fires from its next tick' : 'paused'}`);
      } catch (err) {
        toast(`Could not change ${s.name}: ${err.message}`, { kind: 'bad' });
      }
      await load();
    }));
    run.addEventListener('click', () => busy(run, async () => {
      try {
        const task = await api('POST', '/schedules/' + q(s.name) + '/trigger');
        toast(`Enqueued a task of ${s.name}`, { nodes: [h('a', { href: hashLink('tasks', { queue: task.queue, task: task.id }), text: 'open it' })] });
      } catch (err) {
        toast(`Could not run ${s.name}: ${err.message}`, { kind: 'bad' });
      }
      await load();
    }));
    const last = s.last_task_id
      ? h('a', { class: 'chip mono', href: hashLink('tasks', { queue: s.queue, task: s.last_task_id }), title: s.last_task_id, text: fmt.shortId(s.last_task_id) })
      : h('span', { class: 'muted', text: '—' });
    return h('tr', { dataset: { schedule: s.name } },
      h('th', { scope: 'row', class: 'wrap-anywhere', text: s.name }),
      h('td', null, h('a', { class: 'chip', href: hashLink('tasks', { queue: s.queue }), text: s.queue })),
      h('td', { class: 'mono' }, s.cron, h('span', { class: 'muted small', text: ' ' + s.timezone })),
      h('td', { dataset: { col: 'state' } }, badge(s.paused ? 'paused' : 'active')),
      h('td', { dataset: { col: 'next' }, title: fmt.exact(s.next_run_at), text: s.next_run_at ? fmt.time(s.next_run_at) : '—' }),
      h('td', { dataset: { col: 'last' }, title: fmt.exact(s.last_run_at), text: s.last_run_at ? fmt.time(s.last_run_at) : '—' }),
      h('td', { dataset: { col: 'task' } }, last),
      h('td', { class: 'actions' }, toggle, ' ', run));
  }

  return {
    title: 'Schedules',
    root,
    mount() { load(); timer = setInterval(load, REFRESH_MS); },
    route() {},
    update() {},
    unmount() { clearInterval(timer); },
  };
}
