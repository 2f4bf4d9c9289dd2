// Agents: list, create, policy and allowlist, blocks, token rotation
// (the token is shown once), deletion with confirmation.
import {api, enc} from './api.js';
import {el, clear, status, lines, time} from './dom.js';

export function mount(root) {
  const msg = el('div', {class: 'status', id: 'agents-status'});
  const once = el('div', {id: 'token-once'});
  const list = el('div', {class: 'scroll'});
  const detail = el('div', {id: 'agent-detail'});

  const handle = el('input', {id: 'new-handle', placeholder: '@owner.agent', required: true, autocomplete: 'off', spellcheck: 'false'});
  const policy = el('select', {id: 'new-policy'}, el('option', {value: 'allowlist'}, 'allowlist (closed)'), el('option', {value: 'open'}, 'open'));
  const allow = el('textarea', {id: 'new-allowlist', rows: 2, placeholder: '@acme.* @kim.assistant'});
  const create = el('form', {class: 'card', id: 'create-agent', onsubmit: async (e) => {
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
      el('p', {}, `Agent ${h} ${what}. Its token is shown only this once; copy it now:`),
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
      el('thead', {}, el('tr', {}, ['Handle', 'Policy', 'Allowlist', 'Blocks', 'Token', 'Created', ''].map((h) => el('th', {}, h)))),
      el('tbody', {}, agents.map((a) => el('tr', {'data-handle': a.handle},
        el('td', {}, a.handle),
        el('td', {}, a.inbound_policy),
        el('td', {}, (a.allowlist || []).join(' ')),
        el('td', {}, (a.blocks || []).join(' ')),
        el('td', {}, a.has_token ? 'yes' : 'revoked'),
        el('td', {}, time(a.created_at)),
        el('td', {}, el('button', {type: 'button', class: 'small', onclick: () => manage(a.handle)}, 'Manage'))))));
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
    const pol = el('select', {id: 'edit-policy'}, ['allowlist', 'open'].map((p) => el('option', {value: p, selected: p === a.inbound_policy}, p)));
    const al = el('textarea', {id: 'edit-allowlist', rows: 3}, (a.allowlist || []).join('\n'));
    const blockIn = el('input', {id: 'block-handle', placeholder: '@owner.agent', autocomplete: 'off'});
    const confirmBox = el('div', {});
    clear(detail).appendChild(el('section', {class: 'card', 'aria-label': `Agent ${h}`},
      el('h2', {}, h),
      el('form', {class: 'row', onsubmit: act(() => api('PUT', `${path}/policy`, {inbound_policy: pol.value}), 'Policy saved.')},
        el('label', {}, 'Inbound policy', pol), el('button', {type: 'submit'}, 'Save policy')),
      el('form', {class: 'row', onsubmit: act(() => api('PUT', `${path}/allowlist`, {entries: lines(al.value)}), 'Allowlist saved.')},
        el('label', {class: 'grow'}, 'Allowlist (handles or @owner.* globs)', al), el('button', {type: 'submit'}, 'Save allowlist')),
      el('h3', {}, 'Blocks'),
      (a.blocks || []).length ? el('ul', {class: 'blocks'}, a.blocks.map((b) => el('li', {}, b, ' ',
        el('button', {type: 'button', class: 'small', onclick: act(() => api('DELETE', `${path}/blocks/${enc(b)}`), `Unblocked ${b}.`)}, 'Unblock'))))
        : el('p', {class: 'empty'}, 'Blocks nobody.'),
      el('form', {class: 'row', onsubmit: act(() => api('POST', `${path}/blocks`, {handle: blockIn.value.trim()}), 'Blocked.')},
        el('label', {}, 'Block', blockIn), el('button', {type: 'submit'}, 'Block')),
      el('h3', {}, 'Token and deletion'),
      el('div', {class: 'row'},
        el('button', {type: 'button', id: 'rotate-token', onclick: act(() => api('POST', `${path}/token`), 'Token rotated: the old one no longer works.')}, 'Rotate token'),
        el('button', {type: 'button', class: 'danger', id: 'delete-agent', onclick: () => {
          clear(confirmBox).appendChild(el('div', {class: 'confirm', role: 'alertdialog'},
            el('p', {}, `Delete ${h}? Its token stops working, it leaves every active session, and the handle can never be used again. Transcripts stay.`),
            el('button', {type: 'button', class: 'danger', id: 'confirm-delete', onclick: act(async () => {
              await api('DELETE', path); clear(detail); return {deleted: true};
            }, `Deleted ${h}.`)}, `Yes, delete ${h}`),
            el('button', {type: 'button', onclick: () => clear(confirmBox)}, 'Cancel')));
        }}, 'Delete agent…')),
      confirmBox));
  }

  root.append(el('h1', {}, 'Agents'), msg, once, create, detail, list);
  refresh();
  return {};
}
