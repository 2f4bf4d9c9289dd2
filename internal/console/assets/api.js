// The operator API client. The operator token lives in this tab's
// sessionStorage (never a cookie, never a URL) and goes out only as an
// Authorization header, to this origin: a page on another site cannot make
// the browser send it, so there is no ambient credential for a cross-site
// request to ride on.

const KEY = 'aspd.console.token';
const BASE = '/admin/v1';

export const getToken = () => sessionStorage.getItem(KEY) || '';
export const setToken = (t) => sessionStorage.setItem(KEY, t);
export const clearToken = () => sessionStorage.removeItem(KEY);

// ApiError is a refusal of the API: status and the {error:{code,message}} body.
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message || code || `HTTP ${status}`);
    this.status = status;
    this.code = code;
  }
}

function headers(extra = {}) {
  return {Authorization: `Bearer ${getToken()}`, ...extra};
}

// unauthorized tells the page that the token was refused (401).
function unauthorized() {
  window.dispatchEvent(new CustomEvent('aspd:unauthorized'));
}

async function errorOf(res) {
  let code = '', message = '';
  try {
    const body = await res.json();
    code = body?.error?.code || '';
    message = body?.error?.message || '';
  } catch { /* not JSON */ }
  if (res.status === 401) unauthorized();
  return new ApiError(res.status, code, message || `HTTP ${res.status}`);
}

// api calls method path (under /admin/v1) with an optional JSON body and
// returns the decoded answer, or throws ApiError.
export async function api(method, path, body, {signal} = {}) {
  const init = {method, headers: headers(), cache: 'no-store', credentials: 'omit', redirect: 'error', signal};
  if (body !== undefined) {
    init.headers['Content-Type'] = 'application/json';
    init.body = JSON.stringify(body);
  }
  const res = await fetch(BASE + path, init);
  if (!res.ok) throw await errorOf(res);
  if (res.status === 204) return null;
  return res.json();
}

// blob GETs path (under /admin/v1) and returns the answer's body as a Blob
// (a transcript download), or throws ApiError.
export async function blob(path) {
  const res = await fetch(BASE + path, {headers: headers(), cache: 'no-store', credentials: 'omit', redirect: 'error'});
  if (!res.ok) throw await errorOf(res);
  return res.blob();
}

// optional is api's answer, or null when the route answers 404: an aspd
// without that feature (the whoami and audit routes of newer versions).
export async function optional(method, path) {
  try {
    return await api(method, path);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) return null;
    throw err;
  }
}

// query builds a query string from the non-empty entries of params.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  const s = q.toString();
  return s ? `?${s}` : '';
}

export const enc = encodeURIComponent;

// stream reads a Server-Sent Events answer with fetch (EventSource cannot
// send an Authorization header) and calls onData(data, id) for each event.
// It returns when the server ends the stream and throws ApiError on a
// refusal or an AbortError when signal aborts.
export async function stream(path, {signal, onData, onOpen}) {
  const res = await fetch(BASE + path, {headers: headers({Accept: 'text/event-stream'}), cache: 'no-store', credentials: 'omit', redirect: 'error', signal});
  if (!res.ok) throw await errorOf(res);
  onOpen?.();
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '', data = [], id = '';
  for (;;) {
    const {value, done} = await reader.read();
    if (done) return;
    buf += value;
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl).replace(/\r$/, '');
      buf = buf.slice(nl + 1);
      if (line === '') {
        if (data.length) onData(data.join('\n'), id);
        data = []; id = '';
      } else if (line.startsWith(':')) {
        // a comment: keepalive
      } else {
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const val = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'data') data.push(val);
        else if (field === 'id') id = val;
      }
    }
  }
}
