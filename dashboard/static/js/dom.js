// DOM building without HTML strings. Every piece of text, whoever supplied it,
// becomes a Text node or a textContent; attributes are set one by one and event
// handlers are functions. The page's CSP enforces Trusted Types, so an innerHTML
// assignment with a string would throw anyway.

/**
 * h('tag', {props}, ...children) creates an element.
 * Props: class, text, dataset {}, on<event>: function, and attributes or DOM
 * properties (value, checked, disabled, hidden...). Children: nodes, strings
 * (as text), numbers, arrays, and null/false (skipped).
 */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  if (props) {
    for (const [key, value] of Object.entries(props)) {
      if (value === undefined || value === null || value === false) continue;
      if (key === 'class') {
        el.className = Array.isArray(value) ? value.filter(Boolean).join(' ') : value;
      } else if (key === 'text') {
        el.textContent = String(value);
      } else if (key === 'dataset') {
        Object.assign(el.dataset, value);
      } else if (key.startsWith('on')) {
        if (typeof value !== 'function') throw new TypeError(`${key} must be a function`);
        el.addEventListener(key.slice(2), value);
      } else if (key === 'style' || key === 'srcdoc' || key === 'innerHTML') {
        throw new TypeError(`h() refuses ${key}`);
      } else if ((key === 'href' || key === 'src') && !/^[#/]/.test(String(value))) {
        throw new TypeError(`h() takes only same-origin paths and fragments as ${key}`);
      } else if (key in el && typeof value !== 'string') {
        el[key] = value;
      } else {
        el.setAttribute(key, value === true ? '' : String(value));
      }
    }
  }
  append(el, children);
  return el;
}

/** append adds children (see h) to el. */
export function append(el, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

/** replace empties el and adds children. */
export function replace(el, ...children) {
  el.replaceChildren();
  return append(el, children);
}

/** setText sets el's text only when it changed (keeps selection and reflows low). */
export function setText(el, text) {
  const s = String(text);
  if (el.textContent !== s) el.textContent = s;
}

/** hashLink returns a fragment link to a view with query parameters. */
export function hashLink(view, params = {}) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') q.set(k, v);
  }
  const s = q.toString();
  return `#/${view}${s ? '?' + s : ''}`;
}
