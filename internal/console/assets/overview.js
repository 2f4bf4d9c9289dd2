// Overview: what this aspd is (version, uptime, store), its cluster's
// nodes, and charts of the last 15 minutes (GET /admin/v1/overview, which
// aspd samples every 5 s whether or not a page is open). The page re-reads
// it every 5 s while the tab is visible. Charts are uPlot (vendor/, MIT),
// loaded by index.html as the global uPlot.
import {api} from './api.js';
import {el, clear, status, time} from './dom.js';

const INTERVAL = 5000;
const WINDOW = 15 * 60; // seconds on the x axis

// charts are the series shown, each in its own chart.
const charts = [
  {key: 'events_per_second', title: 'Events / s', unit: '/s'},
  {key: 'connections', title: 'WebSocket connections', unit: ''},
  {key: 'deliver_p99_ms', title: 'Send-to-deliver p99', unit: ' ms'},
  {key: 'chorus_backlog', title: 'Chorus backlog', unit: ''},
  {key: 'http_5xx_per_second', title: 'HTTP 5xx / s', unit: '/s'},
];

export function mount(root) {
  const msg = el('div', {class: 'status'});
  const facts = el('div', {class: 'grid', id: 'overview-facts'});
  const nodes = el('div', {class: 'scroll', id: 'overview-nodes'});
  const grid = el('div', {class: 'grid charts', id: 'overview-charts'});
  const plots = new Map(); // key -> {plot, box, latest}
  let timer = null, stopped = false;

  function fact(id, label, value) {
    return el('div', {class: 'card stat', id}, el('div', {class: 'label'}, label), el('div', {class: 'value'}, value));
  }

  function uptime(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600), m = Math.floor(s % 3600 / 60);
    return d ? `${d}d ${h}h` : h ? `${h}h ${m}m` : `${m}m ${s % 60}s`;
  }

  // draw puts series key on its chart, making the chart the first time.
  function draw(c, t, ys) {
    let p = plots.get(c.key);
    if (!p) {
      const box = el('div', {class: 'plot'});
      const latest = el('span', {class: 'latest note'});
      grid.appendChild(el('div', {class: 'card chart', id: `chart-${c.key}`}, el('h3', {}, c.title, ' ', latest), box));
      p = {box, latest, plot: null};
      plots.set(c.key, p);
    }
    const last = [...ys].reverse().find((v) => v !== null && v !== undefined);
    p.latest.textContent = last === undefined ? 'no data yet' : `now ${last}${c.unit}`;
    if (typeof uPlot !== 'function') return; // the script did not load: the numbers still show
    const width = Math.max(200, p.box.clientWidth || 300);
    if (!p.plot) {
      // The x axis is always the last 15 minutes up to the newest sample,
      // however few samples there are yet.
      p.plot = new uPlot({width, height: 140, legend: {show: false}, cursor: {show: true},
        scales: {x: {time: true, range: (u) => { const end = u.data[0].at(-1) ?? Date.now() / 1000; return [end - WINDOW, end]; }},
          y: {range: (u, lo, hi) => [0, Math.max(1, (hi ?? 0) * 1.1)]}},
        series: [{}, {label: c.title, stroke: '#1f5fbf', fill: 'rgba(31,95,191,0.1)', width: 1.5, spanGaps: false}],
        axes: [{}, {size: 50}]}, [t, ys], p.box);
    } else {
      p.plot.setData([t, ys]);
      if (Math.abs(p.plot.width - width) > 8) p.plot.setSize({width, height: 140});
    }
  }

  async function sample() {
    timer = null;
    try {
      const o = await api('GET', '/overview');
      if (stopped) return;
      status(msg, '');
      clear(facts).append(
        fact('ov-version', 'Version', o.version + (o.revision ? ` (${o.revision.slice(0, 12)})` : '')),
        fact('ov-uptime', 'Uptime', uptime(o.uptime_seconds)),
        fact('ov-store', 'Store', o.store));
      clear(nodes).appendChild(el('table', {id: 'nodes-table'},
        el('thead', {}, el('tr', {}, ['Node', 'Address', 'Started', 'Heartbeat age', 'Agents connected'].map((h) => el('th', {}, h)))),
        el('tbody', {}, o.nodes.map((n) => el('tr', {'data-node': n.id},
          el('td', {}, n.id, n.self ? ' (this node)' : ''), el('td', {}, n.addr || ''), el('td', {}, time(n.started_at)),
          el('td', {}, `${(n.heartbeat_age_ms / 1000).toFixed(1)} s`), el('td', {}, String(n.connections)))))));
      const s = o.series;
      for (const c of charts) draw(c, s.t, s[c.key]);
    } catch (err) {
      if (!stopped) status(msg, `Loading the overview failed: ${err.message}`, 'error');
    }
    if (!stopped) timer = setTimeout(sample, INTERVAL);
  }

  root.append(el('h1', {}, 'Overview'), msg, facts, el('h2', {}, 'Nodes'), nodes,
    el('h2', {}, 'Last 15 minutes'), el('p', {class: 'hint'}, 'Sampled by aspd every 5 s. A gap is a sample with no value (no delivery in that interval, Chorus off).'), grid);
  sample();
  return {
    pause() { clearTimeout(timer); timer = null; },
    resume() { if (!timer && !stopped) sample(); },
    stop() { stopped = true; clearTimeout(timer); for (const p of plots.values()) p.plot?.destroy(); },
  };
}
