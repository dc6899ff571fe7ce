// Shared pieces of the interface: badges, empty states, toasts, confirmations.
import { h, replace } from './dom.js';

/** badge shows a task or attempt status with its colour. */
export function badge(status, extra) {
  return h('span', { class: ['badge', 'st-' + String(status).replace(/[^a-z_]/g, '')] , text: extra || status });
}

/** empty is an empty state: a title, and a line of explanation. */
export function empty(title, ...detail) {
  return h('div', { class: 'empty' }, h('p', { class: 'empty-title', text: title }),
    detail.length ? h('p', { class: 'empty-detail' }, ...detail) : null);
}

/** errorBox shows a failed call's message (as text). */
export function errorBox(err) {
  return h('div', { class: 'error-box', role: 'alert' },
    h('strong', { text: 'Error: ' }), err && err.message ? err.message : String(err));
}

/** toast shows a short message; extra nodes (links) may follow. */
export function toast(message, { kind = 'ok', nodes = [], ms = 6000 } = {}) {
  const box = document.getElementById('toasts');
  const close = h('button', { class: 'toast-close', type: 'button', 'aria-label': 'Dismiss', text: '×' });
  const t = h('div', { class: ['toast', 'toast-' + kind] }, h('span', { text: message }), ...nodes, close);
  close.addEventListener('click', () => t.remove());
  box.append(t);
  if (ms) setTimeout(() => t.remove(), ms);
  return t;
}

/**
 * confirm asks in a modal dialog and resolves to true when confirmed.
 * Escape or Cancel resolve to false. A destructive confirmation starts with the
 * focus on Cancel.
 */
export function confirm({ title, body = [], action, destructive = false }) {
  return new Promise((resolve) => {
    const cancel = h('button', { type: 'button', class: 'btn', text: 'Cancel', value: 'cancel' });
    const ok = h('button', { type: 'submit', class: ['btn', destructive ? 'btn-danger' : 'btn-primary'], text: action, value: 'ok' });
    const form = h('form', { method: 'dialog' },
      h('h2', { text: title }),
      h('div', { class: 'dialog-body' }, ...body),
      h('div', { class: 'dialog-actions' }, cancel, ok));
    const dialog = h('dialog', { class: 'confirm', 'aria-label': title }, form);
    cancel.addEventListener('click', () => dialog.close('cancel'));
    dialog.addEventListener('close', () => {
      resolve(dialog.returnValue === 'ok');
      dialog.remove();
    });
    document.body.append(dialog);
    dialog.showModal();
    (destructive ? cancel : ok).focus();
  });
}

/** busy disables a button while fn runs, and restores it. */
export async function busy(button, fn) {
  const label = button.textContent;
  button.disabled = true;
  button.setAttribute('aria-busy', 'true');
  try {
    return await fn();
  } finally {
    button.disabled = false;
    button.removeAttribute('aria-busy');
    button.textContent = label;
  }
}

/** field is a labelled form control with an optional hint. */
export function field(label, control, hint) {
  const id = control.id || ('f-' + Math.random().toString(36).slice(2, 9));
  control.id = id;
  const hintEl = hint ? h('span', { class: 'hint', id: id + '-hint', text: hint }) : null;
  if (hintEl) control.setAttribute('aria-describedby', hintEl.id);
  return h('div', { class: 'field' }, h('label', { for: id, text: label }), control, hintEl);
}

/** queueSelect is a select of queue names, with an optional "all" entry. */
export function queueSelect(names, selected, { all = null, id } = {}) {
  const sel = h('select', { id, name: 'queue' });
  fillQueueSelect(sel, names, selected, all);
  return sel;
}

/** fillQueueSelect refreshes a queue select's options, keeping the selection. */
export function fillQueueSelect(sel, names, selected = sel.value, all = sel.dataset.all || null) {
  const want = [...(all ? [''] : []), ...names];
  const have = [...sel.options].map((o) => o.value);
  if (selected && !want.includes(selected)) want.push(selected);
  if (want.length === have.length && want.every((v, i) => v === have[i])) {
    if (selected !== undefined && sel.value !== selected) sel.value = selected;
    return;
  }
  if (all) sel.dataset.all = all;
  replace(sel, want.map((n) => h('option', { value: n, text: n === '' ? all : n })));
  sel.value = selected || want[0] || '';
}

/** section is a titled card. */
export function card(title, ...children) {
  return h('section', { class: 'card' }, title ? h('h2', { class: 'card-title', text: title }) : null, ...children);
}

/** pre shows text preformatted (never as HTML). */
export function pre(text, cls) {
  return h('pre', { class: cls, text });
}
