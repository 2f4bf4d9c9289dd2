// Search over every session's messages (GET /admin/v1/search). Snippets
// are text nodes; the segments the query matched are wrapped in <mark>.
import {api, enc, query, ApiError} from './api.js';
import {el, clear, status, time, rfc3339, u} from './dom.js';

export function mount(root) {
  const msg = el('div', {class: 'status', id: 'search-status'});
  const results = el('ol', {id: 'search-results', class: 'results'});
  const more = el('div', {});
  const f = {
    q: el('input', {id: 'search-q', type: 'search', required: true, placeholder: 'words to find', autocomplete: 'off'}),
    session: el('input', {id: 'search-session', placeholder: 'sess_…', autocomplete: 'off'}),
    sender: el('input', {id: 'search-sender', placeholder: '@owner.agent', autocomplete: 'off'}),
    participant: el('input', {id: 'search-participant', placeholder: '@owner.agent', autocomplete: 'off'}),
    type: el('input', {id: 'search-type', placeholder: 'session.message', autocomplete: 'off'}),
    since: el('input', {id: 'search-since', type: 'datetime-local'}),
    until: el('input', {id: 'search-until', type: 'datetime-local'}),
  };
  const form = el('form', {class: 'card', id: 'search-form', onsubmit: (e) => { e.preventDefault(); run(''); }},
    el('div', {class: 'row'}, el('label', {class: 'grow'}, 'Search', f.q), el('button', {type: 'submit'}, 'Search')),
    el('details', {}, el('summary', {}, 'Filters'),
      el('div', {class: 'row'},
        el('label', {}, 'Session', f.session), el('label', {}, 'Sender', f.sender), el('label', {}, 'Participant', f.participant),
        el('label', {}, 'Type', f.type), el('label', {}, 'Since', f.since), el('label', {}, 'Until', f.until))));

  async function run(cursor) {
    const q = {q: f.q.value.trim(), session: f.session.value.trim(), sender: f.sender.value.trim(), participant: f.participant.value.trim(),
      type: f.type.value.trim(), since: rfc3339(f.since.value), until: rfc3339(f.until.value), limit: 25, cursor};
    if (!q.q) return;
    try {
      const page = await api('GET', `/search${query(q)}`);
      if (!cursor) clear(results);
      for (const h of page.hits) results.appendChild(hit(h));
      status(msg, results.childElementCount ? '' : 'Nothing found.');
      clear(more);
      if (page.next_cursor) more.appendChild(el('button', {type: 'button', onclick: () => run(page.next_cursor)}, 'More results'));
    } catch (err) {
      // A 404 with no filter given can only be the route itself missing
      // (an aspd without search); with filters it may name an unknown session.
      const filtered = Object.entries(q).some(([k, v]) => v && !['q', 'limit'].includes(k));
      const text = err instanceof ApiError && err.status === 404 && !filtered
        ? 'Search is not available on this server (GET /admin/v1/search answered 404).' : `Search failed: ${err.message}`;
      status(msg, text, 'error');
    }
  }

  root.append(el('h1', {}, 'Search'), form, msg, results, more);
  f.q.focus();
  return {};
}

function hit(h) {
  return el('li', {class: 'hit', 'data-session': h.session_id, 'data-seq': h.sequence},
    el('div', {class: 'meta'},
      el('a', {href: `#/sessions/${enc(h.session_id)}`}, h.session_id), ` #${h.sequence} · ${h.type} · `,
      u(h.sender || ''), ` · ${time(h.created_at)}`),
    el('p', {class: 'snippet', dir: 'auto'}, (h.snippet || []).map((s) => (s.match ? el('mark', {}, s.text) : s.text))));
}
