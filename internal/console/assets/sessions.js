// Sessions: a filtered listing, and one session's transcript with its
// events arriving live.
import {api, enc, query, stream, ApiError} from './api.js';
import {el, clear, status, time, rfc3339} from './dom.js';

export function mountList(root) {
  const msg = el('div', {class: 'status'});
  const out = el('div', {class: 'scroll'});
  const more = el('div', {});
  const f = {
    participant: el('input', {id: 'f-participant', placeholder: '@owner.agent', autocomplete: 'off'}),
    state: el('select', {id: 'f-state'}, ['', 'active', 'ended'].map((s) => el('option', {value: s}, s || 'any'))),
    since: el('input', {id: 'f-since', type: 'datetime-local'}),
    until: el('input', {id: 'f-until', type: 'datetime-local'}),
  };
  const form = el('form', {class: 'card row', id: 'sessions-filter', onsubmit: (e) => { e.preventDefault(); load(''); }},
    el('label', {}, 'Participant', f.participant), el('label', {}, 'State', f.state),
    el('label', {}, 'Since', f.since), el('label', {}, 'Until', f.until),
    el('button', {type: 'submit'}, 'Filter'));

  async function load(cursor) {
    const q = {participant: f.participant.value.trim(), state: f.state.value, since: rfc3339(f.since.value), until: rfc3339(f.until.value), limit: 50, cursor};
    try {
      const page = await api('GET', `/sessions${query(q)}`);
      status(msg, '');
      if (!cursor) clear(out).appendChild(table());
      const body = out.querySelector('tbody');
      for (const s of page.sessions) body.appendChild(row(s));
      if (!out.querySelector('tbody tr')) clear(out).appendChild(el('p', {class: 'empty'}, 'No sessions match.'));
      clear(more);
      if (page.next_cursor) more.appendChild(el('button', {type: 'button', onclick: () => load(page.next_cursor)}, 'More'));
    } catch (err) { status(msg, `Loading sessions failed: ${err.message}`, 'error'); }
  }

  root.append(el('h1', {}, 'Sessions'), form, msg, out, more);
  load('');
  return {};
}

function table() {
  return el('table', {id: 'sessions-table'},
    el('thead', {}, el('tr', {}, ['Session', 'Topic', 'State', 'Participants', 'Created'].map((h) => el('th', {}, h)))),
    el('tbody', {}));
}

function row(s) {
  return el('tr', {'data-session': s.id},
    el('td', {}, el('a', {href: `#/sessions/${enc(s.id)}`}, s.id)),
    el('td', {}, s.topic || ''),
    el('td', {}, s.state),
    el('td', {}, (s.participants || []).map((p) => `${p.handle} (${p.status})`).join(', ')),
    el('td', {}, time(s.created_at)));
}

// mountSession shows session id: its snapshot, then its transcript, read
// from the live stream, which sends the log from after_sequence on and then
// every new event. While the tab is hidden the stream is closed; on return
// it reopens after the last sequence shown, so nothing is missed or doubled.
export function mountSession(root, id) {
  const msg = el('div', {class: 'status'});
  const head = el('div', {class: 'card', id: 'session-head'});
  const live = el('span', {class: 'live', id: 'live-state'}, 'connecting');
  const transcript = el('ol', {id: 'transcript', class: 'transcript', 'aria-live': 'polite'});
  let last = 0;          // the last sequence shown
  let ctrl = null;       // the open stream's AbortController
  let stopped = false;   // left the page
  let paused = false;    // tab hidden
  let retry = null;      // pending reconnect timer
  let backoff = 1000;

  async function snapshot() {
    try {
      const s = await api('GET', `/sessions/${enc(id)}`);
      clear(head).append(
        el('h2', {}, s.topic || '(no topic)'),
        el('p', {}, el('code', {}, s.id), ` · ${s.state} · created ${time(s.created_at)}`, s.ended_at ? ` · ended ${time(s.ended_at)}` : ''),
        el('ul', {class: 'participants'}, (s.participants || []).map((p) => el('li', {}, `${p.handle}: ${p.status}`))));
    } catch (err) { status(msg, err instanceof ApiError && err.status === 404 ? 'No such session.' : err.message, 'error'); }
  }

  // refreshSoon re-reads the snapshot once after a burst of membership events.
  let refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; if (!stopped) snapshot(); }, 500);
  }

  function setLive(text) { live.textContent = text; }

  async function open() {
    if (stopped || paused || ctrl) return;
    ctrl = new AbortController();
    const mine = ctrl;
    setLive('connecting');
    try {
      await stream(`/sessions/${enc(id)}/events/live${query({after_sequence: last || undefined})}`, {
        signal: mine.signal,
        onOpen: () => { setLive('live'); backoff = 1000; },
        onData: (data) => {
          const ev = JSON.parse(data);
          if (ev.sequence <= last) return;
          last = ev.sequence;
          transcript.appendChild(render(ev));
          if (ev.type !== 'session.message') refreshSoon();
        },
      });
    } catch (err) {
      if (mine.signal.aborted) return;
      if (err instanceof ApiError && err.status !== 429 && err.status < 500) { setLive('closed'); status(msg, err.message, 'error'); ctrl = null; return; }
    } finally {
      if (ctrl === mine) ctrl = null;
    }
    if (stopped || paused) return;
    // The stream ended (server restart, network): reconnect after the last sequence.
    setLive('reconnecting');
    retry = setTimeout(() => { retry = null; open(); }, backoff);
    backoff = Math.min(backoff * 2, 10000);
  }

  function close() {
    clearTimeout(retry); retry = null;
    if (ctrl) { ctrl.abort(); ctrl = null; }
  }

  root.append(el('p', {}, el('a', {href: '#/sessions'}, '← Sessions')), msg, head,
    el('h2', {}, 'Transcript ', live), transcript);
  snapshot();
  open();
  return {
    pause() { paused = true; close(); setLive('paused (tab hidden)'); },
    resume() { paused = false; open(); },
    stop() { stopped = true; close(); },
  };
}

// render draws one event. Every value is text: message content, topics and
// handles can never become markup.
export function render(ev) {
  const p = ev.payload || {};
  const meta = el('div', {class: 'meta'}, el('span', {class: 'seq'}, `#${ev.sequence}`), ' ', el('span', {class: 'when'}, time(ev.created_at)));
  if (ev.type === 'session.message') {
    return el('li', {class: 'event message', 'data-seq': ev.sequence},
      meta, el('div', {class: 'sender'}, p.sender), el('div', {class: 'content'}, content(p.content)));
  }
  const who = p.agent || p.invitee || p.ended_by || p.reopened_by || '';
  const extra = [];
  if (p.by) extra.push(`by ${p.by}`);
  if (p.reason) extra.push(`reason ${p.reason}`);
  if (p.topic) extra.push(`topic ${p.topic}`);
  return el('li', {class: 'event system', 'data-seq': ev.sequence},
    meta, el('div', {class: 'what'}, `${ev.type.replace(/^session\./, '')} ${who} ${extra.join(', ')}`.trim()));
}

// content renders message content: a string, or parts (text as text, the
// rest as their JSON, as text; image and file URLs are shown, not loaded).
function content(c) {
  if (typeof c === 'string') return el('p', {class: 'text'}, c);
  if (!Array.isArray(c)) return el('pre', {}, JSON.stringify(c));
  return c.map((part) => {
    if (part.type === 'text') return el('p', {class: 'text'}, part.text);
    return el('pre', {class: `part ${part.type}`}, `[${part.type}] ${JSON.stringify(part.type === 'data' ? part.data : part)}`);
  });
}
