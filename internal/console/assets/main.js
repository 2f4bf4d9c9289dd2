// The console's shell: login, the hash router, and pausing the current
// page's live work while the tab is hidden.
import {api, getToken, setToken, clearToken} from './api.js';
import {clear} from './dom.js';
import * as agents from './agents.js';
import * as sessions from './sessions.js';
import * as search from './search.js';
import * as health from './health.js';

const $ = (id) => document.getElementById(id);
let current = null; // the mounted page's controller {pause, resume, stop}

function showLogin(error = '') {
  current?.stop?.(); current = null;
  clear($('main'));
  $('nav').hidden = true;
  $('login').hidden = false;
  $('login-error').textContent = error;
  $('login-token').focus();
}

function route() {
  if (!getToken()) { showLogin(); return; }
  $('login').hidden = true;
  $('nav').hidden = false;
  current?.stop?.(); current = null;
  const main = clear($('main'));
  const hash = location.hash.replace(/^#\/?/, '');
  const [page, ...rest] = hash.split('/');
  for (const a of document.querySelectorAll('#nav a')) a.classList.toggle('active', a.dataset.page === (page || 'agents'));
  switch (page) {
    case 'sessions': current = rest.length ? sessions.mountSession(main, decodeURIComponent(rest.join('/'))) : sessions.mountList(main); break;
    case 'search': current = search.mount(main); break;
    case 'health': current = health.mount(main); break;
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
