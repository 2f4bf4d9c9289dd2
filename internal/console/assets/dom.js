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
