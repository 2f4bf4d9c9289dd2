// Sessions: a filtered, sortable listing, and one session's transcript
// with its events arriving live and the operator's actions on it.
import {api, blob, enc, query, stream, ApiError} from './api.js';
import {el, clear, status, time, rfc3339, u, confirmDialog, download} from './dom.js';

// sorts are the listing's orders. "created" is the server's (newest first,
// keyset-paged by id); the others re-order the rows loaded so far.
const sorts = {
  created: (a, b) => b.created_at - a.created_at || (a.id < b.id ? 1 : -1),
  activity: (a, b) => b.last_activity_at - a.last_activity_at,
  messages: (a, b) => b.message_count - a.message_count,
};

export function mountList(root) {
  const msg = el('div', {class: 'status'});
  const out = el('div', {class: 'scroll'});
  const more = el('div', {});
  const f = {
    participant: el('input', {id: 'f-participant', placeholder: '@owner.agent', autocomplete: 'off'}),
    state: el('select', {id: 'f-state'}, ['', 'active', 'ended'].map((s) => el('option', {value: s}, s || 'any'))),
    since: el('input', {id: 'f-since', type: 'datetime-local'}),
    until: el('input', {id: 'f-until', type: 'datetime-local'}),
    sort: el('select', {id: 'f-sort', onchange: () => draw()},
      el('option', {value: 'created'}, 'newest first'), el('option', {value: 'activity'}, 'last activity'),
      el('option', {value: 'messages'}, 'most messages')),
  };
  const form = el('form', {class: 'card row', id: 'sessions-filter', onsubmit: (e) => { e.preventDefault(); load(''); }},
    el('label', {}, 'Participant', f.participant), el('label', {}, 'State', f.state),
    el('label', {}, 'Since', f.since), el('label', {}, 'Until', f.until),
    el('button', {type: 'submit'}, 'Filter'), el('label', {}, 'Sort', f.sort));
  let rows = []; // the sessions loaded so far, in the server's order

  function draw() {
    if (!rows.length) { clear(out).appendChild(el('p', {class: 'empty'}, 'No sessions match.')); return; }
    const t = table();
    const body = t.querySelector('tbody');
    for (const s of [...rows].sort(sorts[f.sort.value])) body.appendChild(row(s));
    clear(out).appendChild(t);
  }

  async function load(cursor) {
    const q = {participant: f.participant.value.trim(), state: f.state.value, since: rfc3339(f.since.value), until: rfc3339(f.until.value), limit: 50, cursor};
    try {
      const page = await api('GET', `/sessions${query(q)}`);
      status(msg, '');
      rows = cursor ? rows.concat(page.sessions) : page.sessions;
      draw();
      clear(more);
      if (page.next_cursor) more.appendChild(el('button', {type: 'button', id: 'sessions-more', onclick: () => load(page.next_cursor)}, 'More'));
    } catch (err) { status(msg, `Loading sessions failed: ${err.message}`, 'error'); }
  }

  root.append(el('h1', {}, 'Sessions'), form, msg, out, more);
  load('');
  return {};
}

function table() {
  return el('table', {id: 'sessions-table'},
    el('thead', {}, el('tr', {}, ['Session', 'Topic', 'State', 'Participants', 'Messages', 'Last activity', 'Created'].map((h) => el('th', {}, h)))),
    el('tbody', {}));
}

function row(s) {
  const parts = (s.participants || []).map((p, i) => [i ? ', ' : '', u(p.handle), ` (${p.status})`]);
  return el('tr', {'data-session': s.id},
    el('td', {}, el('a', {href: `#/sessions/${enc(s.id)}`}, s.id)),
    el('td', {}, u(s.topic || '')),
    el('td', {}, s.state),
    el('td', {}, parts),
    el('td', {class: 'num'}, String(s.message_count ?? '')),
    el('td', {}, time(s.last_activity_at)),
    el('td', {}, time(s.created_at)));
}

// mountSession shows session id: its snapshot and actions, then its
// transcript, read from the live stream, which sends the log from
// after_sequence on and then every new event. While the tab is hidden the
// stream is closed; on return it reopens after the last sequence shown, so
// nothing is missed or doubled. The page follows new events while it is
// scrolled to the bottom; scrolled up, it counts them in a "new messages"
// button instead of moving.
export function mountSession(root, id) {
  const msg = el('div', {class: 'status', id: 'session-status'});
  const head = el('div', {class: 'card', id: 'session-head'});
  // The badge is a status region: screen readers announce each state.
  const live = el('span', {class: 'live state-connecting', id: 'live-state', role: 'status', 'aria-live': 'polite'}, 'connecting');
  const transcript = el('ol', {id: 'transcript', class: 'transcript', role: 'log'});
  const marker = el('button', {type: 'button', id: 'new-messages', class: 'new-messages', hidden: true, onclick: () => { follow(); }});
  let last = 0;          // the last sequence shown
  let ctrl = null;       // the open stream's AbortController
  let stopped = false;   // left the page
  let paused = false;    // tab hidden
  let retry = null;      // pending reconnect timer
  let backoff = 1000;
  let following = true;  // at the bottom: new events scroll into view
  let unseen = 0;        // events arrived while scrolled up
  let session = null;    // the last snapshot

  const atBottom = () => window.innerHeight + window.scrollY >= document.documentElement.scrollHeight - 40;
  function follow() {
    unseen = 0; marker.hidden = true; following = true;
    window.scrollTo(0, document.documentElement.scrollHeight);
  }
  // Only the reader scrolling up stops the following: layout changes above
  // (a status line, a redrawn snapshot) move the page without meaning that.
  let lastY = window.scrollY;
  function onScroll() {
    const y = window.scrollY;
    if (atBottom()) {
      following = true;
      if (unseen) { unseen = 0; marker.hidden = true; }
    } else if (y < lastY) {
      following = false;
    }
    lastY = y;
  }
  window.addEventListener('scroll', onScroll, {passive: true});

  // act runs an operator action after its dialog, then redraws the snapshot.
  async function act(dialog, fn, done) {
    const ok = await confirmDialog(dialog);
    if (ok === null) return;
    try {
      await fn(ok);
      status(msg, done, 'ok');
    } catch (err) {
      status(msg, err instanceof ApiError && err.status === 404 && dialog.missing ? dialog.missing : err.message, 'error');
    }
    snapshot();
  }

  async function snapshot() {
    try {
      const s = await api('GET', `/sessions/${enc(id)}`);
      session = s;
      const activeNow = s.state === 'active';
      clear(head).append(
        el('h2', {}, u(s.topic || '(no topic)')),
        el('p', {}, el('code', {}, s.id), ` · `, el('span', {id: 'session-state'}, s.state), ` · created ${time(s.created_at)}`, s.ended_at ? ` · ended ${time(s.ended_at)}` : ''),
        el('ul', {class: 'participants'}, (s.participants || []).map((p) => el('li', {'data-handle': p.handle}, u(p.handle), `: ${p.status} `,
          activeNow && (p.status === 'joined' || p.status === 'invited')
            ? el('button', {type: 'button', class: 'small secondary change remove-participant', onclick: () => act(
              {title: `Remove ${p.handle}?`, text: `${p.handle} leaves this session now (session.left). If no joined participant remains, the session ends.`, ok: 'Remove', okId: 'confirm-remove'},
              () => api('DELETE', `/sessions/${enc(id)}/participants/${enc(p.handle)}`), `Removed ${p.handle}.`)}, 'Remove…')
            : null))),
        el('div', {class: 'row'},
          el('button', {type: 'button', id: 'download-transcript', class: 'secondary', onclick: async () => {
            try { download(await blob(`/sessions/${enc(id)}/transcript`), `${id}.jsonl`); } catch (err) { status(msg, `Download failed: ${err.message}`, 'error'); }
          }}, 'Download transcript (JSON Lines)'),
          activeNow ? el('button', {type: 'button', id: 'end-session', class: 'danger change', onclick: () => act(
            {title: 'End this session?', text: 'Every participant sees session.ended; no one can send to it until a participant reopens it.', ok: 'End session', okId: 'confirm-end'},
            () => api('POST', `/sessions/${enc(id)}/end`, {}), 'Session ended.')}, 'End session…') : null));
    } catch (err) { status(msg, err instanceof ApiError && err.status === 404 ? 'No such session.' : err.message, 'error'); }
  }

  // redact asks for a reason and redacts event seq (POST .../redact); the
  // answer is the event as readers now see it, drawn in place.
  async function redact(seq) {
    const reason = await confirmDialog({title: `Redact event #${seq}?`, ok: 'Redact', okId: 'confirm-redact',
      text: 'Its content is replaced by a tombstone for every reader, for good. The event keeps its place in the log.',
      field: {label: 'Reason (kept with the tombstone)', required: true}});
    if (reason === null) return;
    try {
      const ev = await api('POST', `/sessions/${enc(id)}/events/${seq}/redact`, {reason});
      transcript.querySelector(`li[data-seq="${seq}"]`)?.replaceWith(draw(ev));
      status(msg, `Event #${seq} redacted.`, 'ok');
    } catch (err) {
      status(msg, err instanceof ApiError && err.status === 404 ? 'Redaction is not available on this server (the redact route answered 404).' : `Redact failed: ${err.message}`, 'error');
    }
  }

  // draw is render with the event's actions.
  function draw(ev) {
    const li = render(ev);
    if (ev.type === 'session.message' && !ev.redacted) {
      li.querySelector('.meta').prepend(el('span', {class: 'actions'},
        el('button', {type: 'button', class: 'small secondary change redact', onclick: () => redact(ev.sequence)}, 'Redact…')));
    }
    return li;
  }

  // refreshSoon re-reads the snapshot once after a burst of membership events.
  let refreshTimer = null;
  function refreshSoon() {
    if (refreshTimer) return;
    refreshTimer = setTimeout(() => { refreshTimer = null; if (!stopped) snapshot(); }, 500);
  }

  // setLive shows the stream's state: live, connecting, reconnecting,
  // closed or paused, each with its own look (console.css .state-*).
  function setLive(state, text = state) {
    live.className = `live state-${state}`;
    live.textContent = text;
  }

  function shown(ev) {
    transcript.appendChild(draw(ev));
    if (following) { window.scrollTo(0, document.documentElement.scrollHeight); return; }
    unseen++;
    marker.textContent = `${unseen} new ${unseen === 1 ? 'event' : 'events'} ↓`;
    marker.hidden = false;
  }

  async function open() {
    if (stopped || paused || ctrl) return;
    ctrl = new AbortController();
    const mine = ctrl;
    setLive(last ? 'reconnecting' : 'connecting');
    try {
      await stream(`/sessions/${enc(id)}/events/live${query({after_sequence: last || undefined})}`, {
        signal: mine.signal,
        onOpen: () => { setLive('live'); backoff = 1000; },
        onData: (data) => {
          const ev = JSON.parse(data);
          if (ev.sequence <= last) return;
          last = ev.sequence;
          shown(ev);
          if (ev.type !== 'session.message') refreshSoon();
        },
      });
    } catch (err) {
      if (mine.signal.aborted) return;
      if (err instanceof ApiError && err.status !== 429 && err.status < 500) {
        setLive('closed');
        status(msg, err.status === 404 ? 'No such session.' : `The live transcript was refused: ${err.message}`, 'error');
        ctrl = null;
        return;
      }
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
    el('h2', {}, 'Transcript ', live), transcript, marker);
  snapshot();
  open();
  return {
    pause() { paused = true; close(); setLive('paused', 'paused (tab hidden)'); },
    resume() { paused = false; open(); },
    stop() { stopped = true; close(); window.removeEventListener('scroll', onScroll); },
    get session() { return session; },
  };
}

// render draws one event. Every value is text, and every user-supplied
// string is bidi-isolated (u): message content, topics and handles can
// never become markup, nor reorder the text around them. A redacted
// event shows its tombstone instead of its content.
export function render(ev) {
  const p = ev.payload || {};
  const meta = el('div', {class: 'meta'}, el('span', {class: 'seq'}, `#${ev.sequence}`), ' ', el('span', {class: 'when'}, time(ev.created_at)));
  if (ev.redacted) {
    const r = ev.redacted;
    return el('li', {class: 'event message redacted', 'data-seq': ev.sequence},
      meta, p.sender ? el('div', {class: 'sender'}, u(p.sender)) : null,
      el('p', {class: 'tombstone'}, 'Redacted', r.by ? [' by ', u(r.by)] : '', r.at ? ` on ${time(r.at)}` : '', r.reason ? [': ', u(r.reason)] : ''));
  }
  if (ev.type === 'session.message') {
    return el('li', {class: 'event message', 'data-seq': ev.sequence},
      meta, el('div', {class: 'sender'}, u(p.sender)), el('div', {class: 'content'}, content(p.content)));
  }
  const who = p.agent || p.invitee || p.ended_by || p.reopened_by || '';
  const extra = [];
  if (p.by) extra.push(['by ', u(p.by)]);
  if (p.reason) extra.push(['reason ', u(p.reason)]);
  if (p.topic) extra.push(['topic ', u(p.topic)]);
  return el('li', {class: 'event system', 'data-seq': ev.sequence},
    meta, el('div', {class: 'what'}, ev.type.replace(/^session\./, ''), who ? [' ', u(who)] : '',
      extra.map((x, i) => [i ? ', ' : ' ', x])));
}

// content renders message content: a string, or parts (text as text, the
// rest as their JSON, as text; image and file URLs are shown, not loaded).
function content(c) {
  if (typeof c === 'string') return el('p', {class: 'text', dir: 'auto'}, c);
  if (!Array.isArray(c)) return el('pre', {dir: 'auto'}, JSON.stringify(c));
  return c.map((part) => {
    if (part.type === 'text') return el('p', {class: 'text', dir: 'auto'}, part.text);
    return el('pre', {class: `part ${part.type}`, dir: 'auto'}, `[${part.type}] ${JSON.stringify(part.type === 'data' ? part.data : part)}`);
  });
}
