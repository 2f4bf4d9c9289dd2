// Health: connections, committed events per second (from two samples),
// slow consumers, the store's status, and the place of the Chorus backlog.
// It samples every few seconds while the tab is visible, and not at all
// while it is hidden.
import {api} from './api.js';
import {el, clear, status, time} from './dom.js';

const INTERVAL = 5000;
const FIRST_RATE = 1000; // the second sample comes sooner, to show a rate at once

export function mount(root) {
  const msg = el('div', {class: 'status'});
  const grid = el('div', {class: 'grid', id: 'health-grid'});
  let prev = null;      // the previous sample, for rates
  let timer = null;
  let stopped = false;

  function card(id, label, value, note) {
    return el('div', {class: 'card stat', id}, el('div', {class: 'label'}, label), el('div', {class: 'value'}, value), note ? el('div', {class: 'note'}, note) : null);
  }

  async function sample() {
    timer = null;
    try {
      const h = await api('GET', '/health');
      if (stopped) return;
      let rate = '…', slowNote = 'since start';
      if (prev && h.sampled_at > prev.sampled_at) {
        const secs = (h.sampled_at - prev.sampled_at) / 1000;
        rate = ((h.events_committed - prev.events_committed) / secs).toFixed(1);
        slowNote = `since start; +${h.slow_consumers - prev.slow_consumers} in the last ${secs.toFixed(0)}s`;
      }
      h.first = !prev;
      prev = h;
      const st = h.store || {};
      clear(grid).append(
        card('h-connections', 'WebSocket connections', h.connections, `${h.agents_online} agents online`),
        card('h-rate', 'Events committed / s', rate, `${h.events_committed} since start`),
        card('h-slow', 'Slow consumers cut', h.slow_consumers, slowNote),
        card('h-store', 'Store', `${st.dialect}: ${st.status}`, `ping ${st.ping_ms} ms`),
        card('h-live', 'Live transcripts open', h.live_transcripts),
        // The Chorus backlog has a named place here; it shows a number only
        // once aspd reports one (the "chorus" member of /admin/v1/health).
        el('div', {class: 'card stat', id: 'chorus-backlog'}, el('div', {class: 'label'}, 'Chorus backlog'),
          h.chorus === undefined ? el('div', {class: 'note'}, 'Not available: Chorus is off on this aspd (no key).')
            : el('div', {class: 'value'}, String(h.chorus.pending) + ' pending' +
                (h.chorus.pending > 0 ? ', oldest ' + Math.round(h.chorus.oldest_pending_age_ms / 1000) + ' s' : ''))));
      status(msg, st.status === 'ok' ? `Sampled ${time(h.sampled_at)}` : 'The store does not answer.', st.status === 'ok' ? 'info' : 'error');
    } catch (err) { status(msg, `Health failed: ${err.message}`, 'error'); }
    if (!stopped && document.visibilityState === 'visible' && !timer) timer = setTimeout(sample, prev && prev.first ? FIRST_RATE : INTERVAL);
  }

  root.append(el('h1', {}, 'Health'), msg, grid);
  sample();
  return {
    pause() { clearTimeout(timer); timer = null; prev = null; },
    resume() { if (!timer) sample(); },
    stop() { stopped = true; clearTimeout(timer); },
  };
}
