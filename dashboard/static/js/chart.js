// The throughput chart of the overview: completed and dead-lettered tasks per
// second, and the backlog, over the last minutes, for one queue or all of them.
import uPlot from '../vendor/uplot/uPlot.esm.js';

const colors = {
  completed: '#16a34a',
  dead: '#dc2626',
  backlog: '#6366f1',
};

/** seriesData turns the store's points into uPlot's columns for queue ('' = all). */
export function seriesData(points, queue) {
  const t = [], completed = [], dead = [], backlog = [];
  for (const p of points) {
    let c = 0, d = 0, b = 0, seen = false;
    for (const [name, v] of Object.entries(p.q || {})) {
      if (queue && name !== queue) continue;
      seen = true;
      c += v[0]; d += v[1]; b += v[2];
    }
    t.push(p.t);
    completed.push(seen ? c : null);
    dead.push(seen ? d : null);
    backlog.push(seen ? b : null);
  }
  return [t, completed, dead, backlog];
}

/** ThroughputChart draws into el and follows its width. */
export class ThroughputChart {
  constructor(el) {
    this.el = el;
    const width = Math.max(300, el.clientWidth);
    const axisStroke = getComputedStyle(document.documentElement).getPropertyValue('--muted').trim() || '#64748b';
    const grid = { stroke: 'rgba(127,127,127,0.15)', width: 1 };
    this.plot = new uPlot({
      width,
      height: 220,
      legend: { live: true },
      cursor: { drag: { x: false, y: false } },
      scales: { x: { time: true, range: (_u, min, max) => [Math.min(min, max - 60), max] }, rate: { range: (_u, _min, max) => [0, Math.max(1, max * 1.1)] },
        backlog: { range: (_u, _min, max) => [0, Math.max(5, max * 1.1)] } },
      series: [
        {},
        { label: 'completed/s', scale: 'rate', stroke: colors.completed, width: 2, fill: 'rgba(22,163,74,0.08)', value: (_u, v) => v == null ? '—' : v.toFixed(2) },
        { label: 'dead/s', scale: 'rate', stroke: colors.dead, width: 2, value: (_u, v) => v == null ? '—' : v.toFixed(2) },
        { label: 'backlog', scale: 'backlog', stroke: colors.backlog, width: 1.5, dash: [6, 4], value: (_u, v) => v == null ? '—' : String(v) },
      ],
      axes: [
        { stroke: axisStroke, grid, ticks: grid },
        { scale: 'rate', label: 'tasks/s', stroke: axisStroke, grid, ticks: grid, size: 50 },
        { scale: 'backlog', side: 1, label: 'backlog', stroke: axisStroke, grid: { show: false }, ticks: grid, size: 56 },
      ],
    }, [[], [], [], []], el);
    this.resize = new ResizeObserver(() => {
      const w = Math.max(300, this.el.clientWidth);
      if (w !== this.plot.width) this.plot.setSize({ width: w, height: 220 });
    });
    this.resize.observe(el);
  }

  update(points, queue) {
    this.plot.setData(seriesData(points, queue));
  }

  destroy() {
    this.resize.disconnect();
    this.plot.destroy();
  }
}
