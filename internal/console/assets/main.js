// The console's shell: login, the hash router, and pausing the current
// page's live work while the tab is hidden.
import {api, optional, getToken, setToken, clearToken} from './api.js';
import {clear} from './dom.js';
import * as overview from './overview.js';
import * as audit from './audit.js';
import * as agents from './agents.js';
import * as sessions from './sessions.js';
import * as search from './search.js';
import * as health from './health.js';

const $ = (id) => document.getElementById(id);
let current = null; // the mounted page's controller {pause, resume, stop}
let scoped = false;  // whoami and audit looked up for this token

// scope asks the server what the token may do (GET /admin/v1/whoami): a
// "read" token gets body.read-only, which hides every change control. An
// aspd without the route (404) has one admin token: everything shows. The
// Audit entry shows only where GET /admin/v1/audit exists.
async function scope() {
  if (scoped) return;
  scoped = true;
  let me = null, log = null;
  try { me = await optional('GET', '/whoami'); } catch { /* shown as admin; the API still decides */ }
  try { log = await optional('GET', '/audit?limit=1'); } catch { /* a 403 or an outage: no menu entry */ }
  document.body.classList.toggle('read-only', me?.scope === 'read');
  $('whoami').textContent = me ? `${me.name} (${me.scope})` : '';
  $('nav-audit').hidden = !log;
}

function showLogin(error = '') {
  current?.stop?.(); current = null;
  clear($('main'));
  $('nav').hidden = true;
  $('login').hidden = false;
  scoped = false;
  document.body.classList.remove('read-only');
  $('login-error').textContent = error;
  $('login-token').focus();
}

function route() {
  if (!getToken()) { showLogin(); return; }
  $('login').hidden = true;
  $('nav').hidden = false;
  scope();
  current?.stop?.(); current = null;
  const main = clear($('main'));
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === (page || 'agents'));
  switch (page) {
    case 'sessions': current = rest.length ? sessions.mountSession(main, decodeURIComponent(rest.join('/'))) : sessions.mountList(main); break;
    case 'search': current = search.mount(main); break;
    case 'health': current = health.mount(main); break;
    case 'overview': current = overview.mount(main); break;
    case 'audit': current = audit.mount(main); break;
    default: current = agents.mount(main);
  }
  if (document.visibilityState !== 'visible') current?.pause?.();
}

async function login(e) {
  e.preventDefault();
  const token = $('login-token').value.trim();
  $('login-token').value = '';
  if (!token) return;
  setToken(token);
  try {
    await api('GET', '/health'); // any operator call: does the token work?
  } catch (err) {
    clearToken();
    showLogin(err.status === 401 ? 'That token was refused.' : `Login failed: ${err.message}`);
    return;
  }
  if (!location.hash) location.hash = '#/agents';
  route();
}

document.addEventListener('DOMContentLoaded', () => {
  $('login-form').addEventListener('submit', login);
  $('logout').addEventListener('click', () => { clearToken(); showLogin(); });
  window.addEventListener('hashchange', route);
  window.addEventListener('aspd:unauthorized', () => { clearToken(); showLogin('The token was refused; log in again.'); });
  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') current?.resume?.();
    else current?.pause?.();
  });
  route();
});
