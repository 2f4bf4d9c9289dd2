// Audit: every operator change, newest first (GET /admin/v1/audit), with
// filters by actor, action and target, paged with next_before.
import {api, query} from './api.js';
import {el, clear, status, time, u} from './dom.js';

export function mount(root) {
  const msg = el('div', {class: 'status', id: 'audit-status'});
  const out = el('div', {class: 'scroll'});
  const more = el('div', {});
  const f = {
    actor: el('input', {id: 'audit-actor', placeholder: 'token name', autocomplete: 'off'}),
    action: el('input', {id: 'audit-action', placeholder: 'session.end', autocomplete: 'off'}),
    target: el('input', {id: 'audit-target', placeholder: '@owner.agent or sess_…', autocomplete: 'off'}),
  };
  const form = el('form', {class: 'card row', id: 'audit-filter', onsubmit: (e) => { e.preventDefault(); load(''); }},
    el('label', {}, 'Actor', f.actor), el('label', {}, 'Action', f.action), el('label', {}, 'Target', f.target),
    el('button', {type: 'submit'}, 'Filter'));

  async function load(before) {
    const q = {actor: f.actor.value.trim(), action: f.action.value.trim(), target: f.target.value.trim(), limit: 50, before};
    try {
      const page = await api('GET', `/audit${query(q)}`);
      status(msg, '');
      if (!before) clear(out).appendChild(el('table', {id: 'audit-table'},
        el('thead', {}, el('tr', {}, ['When', 'Actor', 'Action', 'Target', 'Request', 'Detail'].map((h) => el('th', {}, h)))), el('tbody', {})));
      const body = out.querySelector('tbody');
      for (const r of page.items || []) {
        body.appendChild(el('tr', {'data-id': r.id},
          el('td', {}, time(typeof r.at === 'number' ? r.at : Date.parse(r.at))), el('td', {}, u(r.actor)), el('td', {}, r.action),
          el('td', {}, u(r.target || '')), el('td', {}, el('code', {}, r.request_id || '')),
          el('td', {}, r.detail && Object.keys(r.detail).length ? el('code', {dir: 'auto'}, JSON.stringify(r.detail)) : '')));
      }
      if (!body.childElementCount) clear(out).appendChild(el('p', {class: 'empty'}, 'No audit entries match.'));
      clear(more);
      if (page.next_before) more.appendChild(el('button', {type: 'button', onclick: () => load(page.next_before)}, 'Older'));
    } catch (err) { status(msg, `Loading the audit log failed: ${err.message}`, 'error'); }
  }

  root.append(el('h1', {}, 'Audit'), msg, form, out, more);
  load('');
  return {};
}
