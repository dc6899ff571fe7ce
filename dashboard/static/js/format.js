// Formatting of numbers, durations and times for people reading at a glance.

const intFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 0 });
const rateFmt = new Intl.NumberFormat(undefined, { maximumFractionDigits: 2 });

/** count formats a whole number with grouping: 12,345. */
export function count(n) { return intFmt.format(n || 0); }

/** rate formats a per-second rate: 0, 0.35, 12.5, 1,200. */
export function rate(n) {
  if (!n) return '0';
  if (n >= 100) return intFmt.format(n);
  return rateFmt.format(n);
}

/** percent formats a 0..1 ratio: 0 %, 3.4 %, 100 %. */
export function percent(r) {
  if (!r) return '0%';
  const p = r * 100;
  return (p < 10 ? p.toFixed(1).replace(/\.0$/, '') : Math.round(p)) + '%';
}

/** duration formats seconds compactly: 850ms, 12s, 4m 05s, 3h 02m, 2d 4h. */
export function duration(seconds) {
  if (seconds === null || seconds === undefined || Number.isNaN(seconds)) return '—';
  const s = Math.max(0, seconds);
  if (s < 1) return Math.round(s * 1000) + 'ms';
  if (s < 60) return (s < 10 ? s.toFixed(1).replace(/\.0$/, '') : Math.round(s)) + 's';
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(Math.floor(s % 60)).padStart(2, '0')}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

/** ms formats milliseconds as a duration. */
export function ms(v) { return duration(v / 1000); }

/** ago formats the time from iso to now (a Date or ms) as "12s ago". */
export function ago(iso, now = Date.now()) {
  if (!iso) return '—';
  const d = (toMs(now) - Date.parse(iso)) / 1000;
  if (d < 0) return 'in ' + duration(-d);
  if (d < 1) return 'just now';
  return duration(d) + ' ago';
}

/** time formats an RFC 3339 time in local time: 14:03:07 today, else with the date. */
export function time(iso) {
  if (!iso) return '—';
  const d = new Date(iso);
  const today = new Date();
  const sameDay = d.toDateString() === today.toDateString();
  const hms = d.toLocaleTimeString(undefined, { hour: '2-digit', minute: '2-digit', second: '2-digit', hour12: false });
  if (sameDay) return hms;
  return d.toLocaleDateString(undefined, { year: 'numeric', month: 'short', day: 'numeric' }) + ' ' + hms;
}

/** exact is the full UTC time, for tooltips. */
export function exact(iso) { return iso ? new Date(iso).toISOString() : ''; }

/**
 * shortId shows the last 8 characters of a UUID: the random part of both v4 and
 * v7 ids (a v7 id starts with its timestamp, so tasks made together share a prefix).
 */
export function shortId(id) { return id ? '…' + String(id).slice(-8) : '—'; }

/** between formats the time from a to b (RFC 3339) as a duration. */
export function between(a, b) {
  if (!a || !b) return '—';
  return duration((Date.parse(b) - Date.parse(a)) / 1000);
}

/** toLocalInput turns an RFC 3339 time into a datetime-local input value. */
export function toLocalInput(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return '';
  const off = d.getTimezoneOffset() * 60000;
  return new Date(d.getTime() - off).toISOString().slice(0, 19);
}

/** fromLocalInput turns a datetime-local value into RFC 3339 UTC ('' stays ''). */
export function fromLocalInput(v) {
  if (!v) return '';
  const d = new Date(v);
  return Number.isNaN(d.getTime()) ? '' : d.toISOString();
}

function toMs(t) { return t instanceof Date ? t.getTime() : t; }
