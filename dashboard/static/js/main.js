// Entry point: opens the live feed and routes #/view?params to a panel.
import { setText } from './dom.js';
import { connect, onSnapshot, onStatus, store } from './live.js';
import { overview } from './views/overview.js';
import { tasks } from './views/tasks.js';
import { dlq } from './views/dlq.js';
import { workers } from './views/workers.js';
import { settings } from './views/settings.js';
import { audit } from './views/audit.js';
import { schedules } from './views/schedules.js';
import { workflows } from './views/workflows.js';
import { groups } from './views/groups.js';

const views = { overview, tasks, dlq, workers, settings, groups, schedules, workflows, audit };
const main = document.getElementById('main');
let current = null; // {name, view}

function parseHash() {
  const raw = location.hash.replace(/^#\/?/, '');
  const [path, query = ''] = raw.split('?');
  const name = views[path] ? path : 'overview';
  return { name, params: Object.fromEntries(new URLSearchParams(query)) };
}

function route() {
  const { name, params } = parseHash();
  if (current && current.name === name) {
    current.view.route(params);
    return;
  }
  if (current) current.view.unmount();
  const view = views[name]();
  current = { name, view };
  main.replaceChildren(view.root);
  view.mount(params);
  document.title = `${view.title} · TaskForge admin`;
  for (const a of document.querySelectorAll('.tabs a')) {
    if (a.dataset.view === name) a.setAttribute('aria-current', 'page');
    else a.removeAttribute('aria-current');
  }
}

function showStatus(s) {
  const live = document.getElementById('live');
  live.dataset.status = s.status;
  setText(document.getElementById('live-text'),
    s.status === 'live' ? 'Live' : s.status === 'connecting' ? 'Connecting…' : s.status === 'stale' ? 'Stale' : 'Offline');
  const banner = document.getElementById('banner');
  banner.hidden = !(s.problem && s.status !== 'live');
  setText(banner, s.problem || '');
}

function showCounts(snap) {
  const dead = snap.queues.reduce((n, q) => n + q.dlq_depth, 0);
  const stale = snap.workers.filter((w) => w.stale).length;
  const dc = document.getElementById('dlq-count');
  dc.hidden = dead === 0;
  setText(dc, String(dead));
  dc.title = `${dead} dead tasks`;
  const sc = document.getElementById('stale-count');
  sc.hidden = stale === 0;
  setText(sc, String(stale));
  sc.title = `${stale} stale workers`;
}

onStatus(showStatus);
onSnapshot((snap) => {
  showCounts(snap);
  if (current) current.view.update(snap);
});
window.addEventListener('hashchange', route);
// The skip link must not change the fragment, which routes.
document.querySelector('.skip').addEventListener('click', (e) => {
  e.preventDefault();
  main.focus();
});
showStatus(store);
route();
connect();
