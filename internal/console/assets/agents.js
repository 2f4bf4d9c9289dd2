// Agents: list (with presence and delivery doors), create, policy and
// allowlist, blocks, token rotation (the token is shown once) and
// revocation, Chorus deliveries, deletion. Every destructive change is
// confirmed in a dialog; change controls carry class "change", hidden for
// a read-only token.
import {api, enc, ApiError} from './api.js';
import {el, clear, status, lines, time, u, confirmDialog} from './dom.js';

export function mount(root) {
  const msg = el('div', {class: 'status', id: 'agents-status'});
  const once = el('div', {id: 'token-once'});
  const list = el('div', {class: 'scroll'});
  const detail = el('div', {id: 'agent-detail'});

  const handle = el('input', {id: 'new-handle', placeholder: '@owner.agent', required: true, autocomplete: 'off', spellcheck: 'false'});
  const policy = el('select', {id: 'new-policy'}, el('option', {value: 'allowlist'}, 'allowlist (closed)'), el('option', {value: 'open'}, 'open'));
  const allow = el('textarea', {id: 'new-allowlist', rows: 2, placeholder: '@acme.* @kim.assistant'});
  const create = el('form', {class: 'card change', id: 'create-agent', onsubmit: async (e) => {
    e.preventDefault();
    try {
      const a = await api('POST', '/agents', {handle: handle.value.trim(), inbound_policy: policy.value, allowlist: lines(allow.value)});
      showToken(a.handle, a.token, 'created');
      handle.value = ''; allow.value = '';
      await refresh();
    } catch (err) { status(msg, `Create failed: ${err.message}`, 'error'); }
  }},
  el('h2', {}, 'New agent'),
  el('div', {class: 'row'},
    el('label', {}, 'Handle', handle),
    el('label', {}, 'Inbound policy', policy),
    el('label', {class: 'grow'}, 'Allowlist', allow)),
  el('button', {type: 'submit'}, 'Create agent'));

  // showToken shows a new token once; it is dropped from the page when
  // dismissed or when the page is left, and never stored.
  function showToken(h, token, what) {
    status(msg, '');
    clear(once).appendChild(el('div', {class: 'card token', role: 'status'},
      el('p', {}, 'Agent ', u(h), ` ${what}. Its token is shown only this once; copy it now:`),
      el('input', {class: 'token-value', readonly: true, value: token, onfocus: (e) => e.target.select()}),
      el('button', {type: 'button', onclick: () => clear(once)}, 'Done, hide it')));
  }

  async function refresh() {
    try {
      const {agents} = await api('GET', '/agents');
      clear(list).appendChild(table(agents));
    } catch (err) { status(msg, `Loading agents failed: ${err.message}`, 'error'); }
  }

  function table(agents) {
    if (!agents.length) return el('p', {class: 'empty'}, 'No agents yet.');
    return el('table', {id: 'agents-table'},
      el('thead', {}, el('tr', {}, ['Handle', 'Policy', 'Presence', 'Doors', 'Allowlist', 'Blocks', 'Token', 'Created', ''].map((h) => el('th', {}, h)))),
      el('tbody', {}, agents.map((a) => el('tr', {'data-handle': a.handle},
        el('td', {}, u(a.handle)),
        el('td', {}, a.inbound_policy),
        el('td', {class: 'presence'}, a.online ? el('span', {class: 'badge online'}, 'online')
          : [el('span', {class: 'badge'}, 'offline'), a.last_seen_at ? ` last seen ${time(a.last_seen_at)}` : ' never seen']),
        el('td', {class: 'doors'}, doors(a)),
        el('td', {}, (a.allowlist || []).map((x, i) => [i ? ' ' : '', u(x)])),
        el('td', {}, (a.blocks || []).map((x, i) => [i ? ' ' : '', u(x)])),
        el('td', {}, a.has_token ? 'yes' : 'revoked'),
        el('td', {}, time(a.created_at)),
        el('td', {}, el('button', {type: 'button', class: 'small', onclick: () => manage(a.handle)}, 'Manage'))))));
  }

  // doors says how events reach the agent: WebSocket connections (how many
  // on this node), a Chorus webhook (with its health), or neither (MCP
  // agents poll).
  function doors(a) {
    const out = [];
    if ((a.doors || []).includes('websocket')) out.push(el('span', {class: 'badge'}, `WebSocket ×${a.connections || 0}`));
    if ((a.doors || []).includes('chorus')) out.push(el('span', {class: `badge ${a.chorus}`}, `Chorus ${a.chorus}`));
    return out.length ? out.map((b, i) => [i ? ' ' : '', b]) : el('span', {class: 'empty'}, 'none (MCP or offline)');
  }

  async function manage(h) {
    let a;
    try { a = await api('GET', `/agents/${enc(h)}`); } catch (err) { status(msg, err.message, 'error'); return; }
    const path = `/agents/${enc(h)}`;
    // act runs one change, reports it, and redraws the table and the panel.
    const act = (fn, done) => async (e) => {
      e?.preventDefault();
      try {
        const r = await fn();
        if (r?.token) showToken(h, r.token, 'has a new token');
        status(msg, done, 'ok');
        await refresh();
        if (!r?.deleted) manage(h);
      } catch (err) {
        status(msg, err.message, 'error');
      }
    };
    // confirmed runs act's change once its dialog is confirmed.
    const confirmed = (dialog, fn, done) => async (e) => {
      e?.preventDefault();
      if (await confirmDialog(dialog) === null) return;
      return act(fn, done)();
    };
    const pol = el('select', {id: 'edit-policy'}, ['allowlist', 'open'].map((p) => el('option', {value: p, selected: p === a.inbound_policy}, p)));
    const al = el('textarea', {id: 'edit-allowlist', rows: 3}, (a.allowlist || []).join('\n'));
    const blockIn = el('input', {id: 'block-handle', placeholder: '@owner.agent', autocomplete: 'off'});
    const chorusBox = el('div', {id: 'chorus-box'});
    clear(detail).appendChild(el('section', {class: 'card', 'aria-label': `Agent ${h}`},
      el('h2', {}, u(h)),
      el('form', {class: 'row change', onsubmit: confirmed(
        {title: `Change ${h}'s inbound policy?`, okId: 'confirm-policy', danger: false, get ok() { return `Set ${pol.value}`; },
          get text() { return pol.value === 'open' ? 'Any agent may then invite it and send to it.' : 'Only handles on its allowlist may then invite it.'; }},
        () => api('PUT', `${path}/policy`, {inbound_policy: pol.value}), 'Policy saved.')},
        el('label', {}, 'Inbound policy', pol), el('button', {type: 'submit'}, 'Save policy')),
      el('form', {class: 'row change', onsubmit: act(() => api('PUT', `${path}/allowlist`, {entries: lines(al.value)}), 'Allowlist saved.')},
        el('label', {class: 'grow'}, 'Allowlist (handles or @owner.* globs)', al), el('button', {type: 'submit'}, 'Save allowlist')),
      el('h3', {}, 'Blocks'),
      (a.blocks || []).length ? el('ul', {class: 'blocks'}, a.blocks.map((b) => el('li', {}, u(b), ' ',
        el('button', {type: 'button', class: 'small change', onclick: act(() => api('DELETE', `${path}/blocks/${enc(b)}`), `Unblocked ${b}.`)}, 'Unblock'))))
        : el('p', {class: 'empty'}, 'Blocks nobody.'),
      el('form', {class: 'row change', onsubmit: act(() => api('POST', `${path}/blocks`, {handle: blockIn.value.trim()}), 'Blocked.')},
        el('label', {}, 'Block', blockIn), el('button', {type: 'submit'}, 'Block')),
      el('h3', {}, 'Chorus webhook'),
      chorusBox,
      el('h3', {class: 'change'}, 'Token and deletion'),
      el('div', {class: 'row change'},
        el('button', {type: 'button', id: 'rotate-token', onclick: confirmed(
          {title: `Rotate ${h}'s token?`, okId: 'confirm-rotate', ok: 'Rotate token', text: 'The old token stops working at once and its connections close. The new one is shown once.'},
          () => api('POST', `${path}/token`), 'Token rotated: the old one no longer works.')}, 'Rotate token…'),
        a.has_token ? el('button', {type: 'button', id: 'revoke-token', class: 'danger', onclick: confirmed(
          {title: `Revoke ${h}'s token?`, okId: 'confirm-revoke', ok: 'Revoke token', text: 'The token stops working at once and its connections close. The agent has no token until you rotate one.'},
          () => api('DELETE', `${path}/token`), 'Token revoked.')}, 'Revoke token…') : null,
        el('button', {type: 'button', class: 'danger', id: 'delete-agent', onclick: confirmed(
          {title: `Delete ${h}?`, okId: 'confirm-delete', ok: `Yes, delete ${h}`,
            text: `Its token stops working, it leaves every active session, and the handle can never be used again. Transcripts stay.`},
          async () => { await api('DELETE', path); clear(detail); return {deleted: true}; }, `Deleted ${h}.`)}, 'Delete agent…'))));
    chorus(h, chorusBox);
  }

  // chorus shows an agent's Chorus registration and recent deliveries, each
  // with Redeliver; an agent without one (404) says so.
  async function chorus(h, box) {
    const path = `/agents/${enc(h)}/chorus`;
    let info, list;
    try {
      info = await api('GET', path);
      list = (await api('GET', `${path}/deliveries?limit=20`)).deliveries || [];
    } catch (err) {
      clear(box).appendChild(el('p', {class: 'empty'}, err instanceof ApiError && err.status === 404 ? 'No Chorus webhook.' : `Chorus: ${err.message}`));
      return;
    }
    clear(box).append(
      el('p', {}, el('span', {class: `badge ${info.failing ? 'failing' : 'healthy'}`}, info.failing ? 'failing' : 'healthy'),
        info.last_success_at ? ` · last success ${time(info.last_success_at)}` : '', info.last_error ? [' · last error ', u(info.last_error)] : ''),
      list.length ? el('div', {class: 'scroll'}, el('table', {id: 'chorus-deliveries'},
        el('thead', {}, el('tr', {}, ['Delivery', 'Session', 'Event', 'State', 'Attempts', 'Last', ''].map((x) => el('th', {}, x)))),
        el('tbody', {}, list.map((d) => el('tr', {'data-delivery': d.id},
          el('td', {}, el('code', {}, d.id)), el('td', {}, el('a', {href: `#/sessions/${enc(d.session_id)}`}, d.session_id)),
          el('td', {}, `#${d.sequence} ${d.event_type}`), el('td', {}, d.state), el('td', {}, String(d.attempts)),
          el('td', {}, d.last_status ? `HTTP ${d.last_status}` : '', d.last_error ? [' ', u(d.last_error)] : ''),
          el('td', {}, el('button', {type: 'button', class: 'small change redeliver', onclick: async () => {
            if (await confirmDialog({title: 'Redeliver?', okId: 'confirm-redeliver', ok: 'Redeliver', danger: false,
              text: `Delivery ${d.id} is queued again, due now; the agent may receive the event twice (webhook-id lets it tell).`}) === null) return;
            try {
              await api('POST', `${path}/deliveries/${enc(d.id)}/redeliver`);
              status(msg, `Delivery ${d.id} queued again.`, 'ok');
            } catch (err) { status(msg, `Redeliver failed: ${err.message}`, 'error'); }
            chorus(h, box);
          }}, 'Redeliver…')))))))
        : el('p', {class: 'empty'}, 'No deliveries yet.'));
  }

  root.append(el('h1', {}, 'Agents'), msg, once, create, detail, list);
  refresh();
  return {};
}
