// Pretty JSON as text nodes in coloured spans. Nothing is ever parsed as HTML.
import { h } from './dom.js';
import { LosslessNumber } from './api.js';

const maxHighlighted = 200000; // characters; larger values are shown as plain text

/** jsonView renders a decoded JSON value (null shows as "null"). */
export function jsonView(value, { label } = {}) {
  const plain = stringify(value);
  const el = h('pre', { class: 'json', tabindex: '0', 'aria-label': label || 'JSON' });
  if (plain.length > maxHighlighted) {
    el.textContent = plain;
    return el;
  }
  render(el, value, 0);
  return el;
}

/** stringify pretty-prints with two-space indents, lossless numbers as written. */
export function stringify(value) {
  const mark = 'lossless-' + Math.random().toString(36).slice(2) + ':';
  const text = JSON.stringify(value, (_k, v) => (v instanceof LosslessNumber ? mark + v.source : v), 2);
  if (text === undefined) return 'null';
  return text.split('"' + mark).map((part, i) => (i === 0 ? part : part.replace('"', ''))).join('');
}

function span(cls, text) { return h('span', { class: cls, text }); }

function render(out, v, depth) {
  const pad = '  '.repeat(depth);
  if (v === null || v === undefined) {
    out.append(span('j-null', 'null'));
  } else if (v instanceof LosslessNumber) {
    out.append(span('j-num', v.source));
  } else if (Array.isArray(v)) {
    if (v.length === 0) { out.append('[]'); return; }
    out.append('[\n');
    v.forEach((item, i) => {
      out.append(pad + '  ');
      render(out, item, depth + 1);
      out.append(i < v.length - 1 ? ',\n' : '\n');
    });
    out.append(pad + ']');
  } else if (typeof v === 'object') {
    const keys = Object.keys(v);
    if (keys.length === 0) { out.append('{}'); return; }
    out.append('{\n');
    keys.forEach((k, i) => {
      out.append(pad + '  ', span('j-key', JSON.stringify(k)), ': ');
      render(out, v[k], depth + 1);
      out.append(i < keys.length - 1 ? ',\n' : '\n');
    });
    out.append(pad + '}');
  } else if (typeof v === 'string') {
    out.append(span('j-str', JSON.stringify(v)));
  } else if (typeof v === 'number') {
    out.append(span('j-num', String(v)));
  } else if (typeof v === 'boolean') {
    out.append(span('j-bool', String(v)));
  } else {
    out.append(String(v));
  }
}
