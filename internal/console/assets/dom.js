// DOM helpers. Every piece of data reaches the page as a text node or an
// attribute value set through the DOM: nothing is ever parsed as HTML.

// el builds an element: el('a', {href: '#/x', class: 'y', onclick: fn}, 'text', child).
// Strings (and numbers) among the children become text nodes.
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
    else if (k === 'class') node.className = v;
    else if (k === 'value' || k === 'checked' || k === 'disabled' || k === 'hidden') node[k] = v;
    else node.setAttribute(k, v === true ? '' : String(v));
  }
  append(node, children);
  return node;
}

function append(node, children) {
  for (const c of children) {
    if (c === undefined || c === null || c === false) continue;
    if (Array.isArray(c)) append(node, c);
    else if (c instanceof Node) node.appendChild(c);
    else node.appendChild(document.createTextNode(String(c)));
  }
}

// clear removes every child of node.
export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// time formats epoch milliseconds as local date and time.
export function time(ms) {
  if (!ms) return '';
  const d = new Date(ms);
  return d.toLocaleString(undefined, {dateStyle: 'short', timeStyle: 'medium'});
}

// rfc3339 turns a datetime-local input's value into RFC 3339 (UTC), or ''.
export function rfc3339(local) {
  if (!local) return '';
  const d = new Date(local);
  if (isNaN(d)) return '';
  return d.toISOString().replace(/\.\d{3}Z$/, 'Z');
}

// message is a status line that replaces the previous one in box.
export function status(box, text, kind = 'info') {
  clear(box);
  if (text) box.appendChild(el('p', {class: kind, role: kind === 'error' ? 'alert' : 'status'}, text));
}

// lines splits a textarea's value into its non-empty entries (newlines,
// commas or spaces between them).
export function lines(text) {
  return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

// u wraps a user-supplied string (a handle, a topic, content, a reason) in
// a <bdi>: its direction is its own (dir auto) and it is isolated from the
// text around it, so an RTL override in it reorders nothing outside.
export function u(text, attrs = {}) {
  return el('bdi', {dir: 'auto', ...attrs}, text ?? '');
}

// confirmDialog asks before a change, in a modal <dialog>: title, what will
// happen, the confirm button's label (and id, for tests), and optionally a
// text field (a reason). It resolves to the field's value (or true) when
// confirmed, and to null when cancelled or closed with Escape.
export function confirmDialog({title, text, ok, okId = 'confirm-ok', danger = true, field = null}) {
  return new Promise((resolve) => {
    const input = field ? el('textarea', {id: 'confirm-field', rows: 2, required: !!field.required, placeholder: field.placeholder || ''}) : null;
    let answer = null;
    const dlg = el('dialog', {id: 'confirm-dialog', 'aria-labelledby': 'confirm-title'},
      el('form', {method: 'dialog', onsubmit: (e) => {
        e.preventDefault();
        if (input && field.required && !input.value.trim()) { input.focus(); return; }
        answer = input ? input.value.trim() : true;
        dlg.close();
      }},
      el('h2', {id: 'confirm-title'}, title),
      el('p', {}, text),
      input ? el('label', {}, field.label, input) : null,
      el('div', {class: 'row'},
        el('button', {type: 'button', id: 'confirm-cancel', class: 'secondary', onclick: () => dlg.close()}, 'Cancel'),
        el('button', {type: 'submit', id: okId, class: danger ? 'danger' : ''}, ok))));
    dlg.addEventListener('close', () => { dlg.remove(); resolve(answer); });
    document.body.appendChild(dlg);
    dlg.showModal();
    (input || dlg.querySelector('#confirm-cancel')).focus();
  });
}

// download saves blob as a file named name (an object URL on a temporary
// link: the console's origin, no navigation).
export function download(blob, name) {
  const url = URL.createObjectURL(blob);
  const a = el('a', {href: url, download: name, hidden: true});
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}
