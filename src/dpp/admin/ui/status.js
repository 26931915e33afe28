/* The status page of the master and the workers (status.html; docs/ADMIN.md
 * "The status page"). Plain JavaScript, no
 * library and no build step: it polls the endpoint's JSON routes and draws
 * the charts as SVG polylines: a master's from each job's history, which
 * the master keeps whether or not the page is open (GET /jobs/{id}
 * "history", the last hour), a worker's from what the page saw since it
 * was opened. It loads nothing from elsewhere (the endpoint's
 * Content-Security-Policy forbids it).
 *
 * Authentication: the read routes it polls need no token today; should an
 * endpoint answer 401, the page asks for the admin token, keeps it in
 * sessionStorage (this tab only, gone when it closes) and sends it as
 * "Authorization: Bearer". The token is never part of the HTML. */
'use strict';

(function () {
  const TOKEN_KEY = 'sluice-admin-token';
  const params = new URLSearchParams(location.search);
  /* ?interval=S (0.2..60 s, default 1): how often the page polls */
  const intervalS = Math.min(60, Math.max(0.2, Number(params.get('interval')) || 1));
  const HISTORY = 120; /* points kept per chart: two minutes at the default interval */
  const SVG = 'http://www.w3.org/2000/svg';

  /* ---- small DOM helpers ---------------------------------------------------------- */

  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = v;
      else e.setAttribute(k, v);
    }
    for (const c of children) if (c != null) e.append(c);
    return e;
  }

  function $(id) { return document.getElementById(id); }

  function fmtNum(n) {
    if (n == null || !isFinite(n)) return '–';
    if (Math.abs(n) >= 1e9) return (n / 1e9).toFixed(2) + 'G';
    if (Math.abs(n) >= 1e6) return (n / 1e6).toFixed(2) + 'M';
    if (Math.abs(n) >= 1e4) return (n / 1e3).toFixed(1) + 'k';
    return Number.isInteger(n) ? String(n) : n.toFixed(2);
  }

  function fmtBytes(n) {
    if (n == null || !isFinite(n)) return '–';
    const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
    let i = 0;
    while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
    return (i === 0 ? String(n) : n.toFixed(1)) + ' ' + units[i];
  }

  function fmtPct(x) { return x == null || !isFinite(x) ? '–' : Math.round(x * 100) + '%'; }

  function fmtDuration(s) {
    if (s == null || !isFinite(s)) return '–';
    if (s < 120) return Math.round(s) + ' s';
    if (s < 7200) return Math.round(s / 60) + ' min';
    return (s / 3600).toFixed(1) + ' h';
  }

  /* ---- fetching, with the token when the endpoint wants one ------------------------ */

  class AuthNeeded extends Error {}

  async function getJSON(path) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
    if (r.status === 401) throw new AuthNeeded(path + ': the endpoint wants its admin token');
    if (!r.ok) {
      let msg = 'HTTP ' + r.status;
      try { msg = (await r.json()).error || msg; } catch (e) { /* not JSON: the status will do */ }
      throw new Error(path + ': ' + msg);
    }
    return r.json();
  }

  function showTokenBox(show) {
    const box = $('token-box');
    if (box) box.hidden = !show;
  }

  function wireTokenBox() {
    const save = $('token-save');
    if (!save) return;
    const use = () => {
      const v = $('token-input').value.trim();
      if (v) sessionStorage.setItem(TOKEN_KEY, v);
      else sessionStorage.removeItem(TOKEN_KEY);
      $('token-input').value = '';
      showTokenBox(false);
      poll();
    };
    save.addEventListener('click', use);
    $('token-input').addEventListener('keydown', (e) => { if (e.key === 'Enter') use(); });
  }

  function banner(text) {
    const b = $('banner');
    b.textContent = text || '';
    b.hidden = !text;
  }

  /* ---- history and charts ---------------------------------------------------------- */

  /* A figure's recent values, one per poll. */
  class Series {
    constructor() { this.v = []; }
    push(x) {
      this.v.push(x);
      if (this.v.length > HISTORY) this.v.shift();
    }
    last() { return this.v.length ? this.v[this.v.length - 1] : null; }
  }

  /* A counter turned into a rate per second between polls. */
  class Rate {
    constructor() { this.prev = null; this.series = new Series(); }
    update(count, now) {
      if (this.prev && now > this.prev.t && count >= this.prev.count)
        this.series.push((count - this.prev.count) / ((now - this.prev.t) / 1000));
      this.prev = { count, t: now };
    }
  }

  /* A small line chart: the series as an SVG polyline over a fixed time
   * axis (opts.cap points, HISTORY by default), scaled to its maximum (or
   * opts.max). */
  function chart(title, series, opts) {
    const w = 180, h = 44, pad = 2;
    const cap = opts.cap || HISTORY;
    const vals = series.v.slice(-cap);
    const max = opts.max != null ? opts.max : Math.max(1e-9, ...vals);
    const svg = document.createElementNS(SVG, 'svg');
    svg.setAttribute('width', w);
    svg.setAttribute('height', h);
    svg.setAttribute('viewBox', `0 0 ${w} ${h}`);
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', title);
    const line = document.createElementNS(SVG, 'polyline');
    const step = (w - 2 * pad) / (cap - 1);
    const x0 = w - pad - (vals.length - 1) * step;
    line.setAttribute('points', vals.map((v, i) => {
      const y = h - pad - (Math.min(v, max) / max) * (h - 2 * pad);
      return (x0 + i * step).toFixed(1) + ',' + y.toFixed(1);
    }).join(' '));
    svg.append(line);
    const last = series.last();
    return el('div', { class: 'chart ' + (opts.cls || ''), 'data-chart': opts.name },
      el('div', { text: `${title}: ${last == null ? '–' : opts.fmt(last)}` }), svg);
  }

  function figures(pairs) {
    const dl = el('dl', { class: 'figures' });
    for (const [k, v] of pairs) dl.append(el('dt', { text: k }), el('dd', { text: v }));
    return dl;
  }

  function updated() {
    $('updated').textContent = new Date().toLocaleTimeString();
  }

  /* ---- the master's page ----------------------------------------------------------- */

  /* job id -> its history as the master keeps it (GET /jobs/{id}:
   * {interval_s, points, decisions}) and when it was fetched: again once
   * a new point is due */
  const jobHistory = new Map();
  const HISTORY_POINTS = 360; /* the master's ring: an hour at its default 10 s */

  async function refreshHistories(jobs, now) {
    const due = jobs.filter((job) => {
      const h = jobHistory.get(job.id);
      return !h || now - h.fetched >= h.history.interval_s * 1000;
    });
    const got = await Promise.all(due.map((job) =>
      getJSON('/jobs/' + encodeURIComponent(job.id)).catch(() => null)));
    got.forEach((j, i) => {
      if (j && j.history) jobHistory.set(due[i].id, { history: j.history, fetched: now });
    });
    const ids = new Set(jobs.map((job) => job.id));
    for (const id of jobHistory.keys()) if (!ids.has(id)) jobHistory.delete(id);
  }

  /* The time axis of a history chart: the points there are, at least 30
   * (so a young job's few points are not a dot at the edge), at most the
   * master's ring and the live end. */
  function historyCap(series) { return Math.min(HISTORY_POINTS + 1, Math.max(30, series.v.length)); }

  /* A figure of the job's history points, then its value now (the live end). */
  function historySeries(job, key, now) {
    const h = jobHistory.get(job.id);
    const s = new Series();
    s.v = (h ? h.history.points.map((p) => p[key]) : []).concat([now]);
    return s;
  }

  function decisionsOf(jobs) {
    const all = [];
    for (const job of jobs) {
      const h = jobHistory.get(job.id);
      for (const d of h ? h.history.decisions : []) all.push(Object.assign({ job: job.id }, d));
    }
    return all.sort((a, b) => b.t - a.t).slice(0, 200);
  }

  function failureText(f) {
    if (!f) return null;
    const where = f.stripe >= 0 ? `${f.file} stripe ${f.stripe}` : f.file;
    return `failed: split ${f.split} (epoch ${f.epoch}, ${where}): ${f.message} [${f.error}]`;
  }

  function jobCard(job) {
    const rate = historySeries(job, 'samples_per_s', job.samples_per_s);
    const wait = historySeries(job, 'trainer_wait', job.trainer_wait);
    const total = job.total_rows || 0;
    const done = Math.min(job.committed_rows || 0, total);
    const epochShown = job.finished ? job.epochs : job.epoch + 1;
    const bar = el('progress', { max: String(Math.max(total, 1)), value: String(done) });
    const dedup = job.dedup_factor != null && job.bytes_encoded > 0
      ? `${job.dedup_factor.toFixed(2)}× (${fmtBytes(job.bytes_saved)} saved)` : '–';
    const card = el('div', { class: 'job', 'data-job': job.id, 'data-state': job.state,
                            'data-epoch': String(job.epoch) },
      el('h3', { text: job.id }, el('span', { class: 'state state-' + job.state, text: job.state })),
      el('div', { class: 'progress-label', 'data-progress': String(total ? done / total : 0),
                  text: `epoch ${epochShown} of ${job.epochs} · ${fmtNum(done)} of ${fmtNum(total)} ` +
                        `rows (${fmtPct(total ? done / total : 0)}) · splits ${job.done}/${job.num_splits}` }),
      bar,
      el('div', { class: 'charts' },
        chart('samples/s', rate, { name: 'rate', fmt: fmtNum, cap: historyCap(rate) }),
        chart('trainer wait', wait,
              { name: 'wait', cls: 'wait', max: 1, fmt: fmtPct, cap: historyCap(wait) })),
      figures([
        ['samples/s', fmtNum(job.samples_per_s)],
        ['time left', job.eta_s == null ? '–' : fmtDuration(job.eta_s)],
        ['samples', fmtNum(job.samples)],
        ['batches', fmtNum(job.batches)],
        ['dedup factor', dedup],
        ['workers', `${job.workers} live · ${job.desired_workers} desired · ` +
                    `${job.granted_workers} granted (${job.min_workers}..${job.max_workers})`],
        ['worker busy', fmtPct(job.worker_busy)],
        ['trainers', `${job.clients} connected · ${job.ranks} rank(s), ${job.sharding}`],
        ['autoscaler', job.autoscale_reason || '–'],
        ['table', job.table],
      ]));
    const fail = failureText(job.failure);
    if (fail) card.append(el('div', { class: 'failure', text: fail }));
    else if (job.split_failures || job.skipped_splits)
      card.append(el('div', { class: 'failure',
        text: `${job.split_failures} split failure(s) this epoch, ${job.skipped_splits} split(s) ` +
              `skipped (${fmtNum(job.skipped_rows)} rows)` }));
    return card;
  }

  function renderMaster(status, jobs, workers) {
    $('name').textContent = status.address || '';
    const s = $('summary');
    s.replaceChildren(
      el('span', { text: status.ready ? 'ready' : 'NOT READY' }),
      el('span', { text: `up ${fmtDuration(status.uptime_s)}` }),
      el('span', { text: `${status.jobs} job(s)` }),
      el('span', { text: `${status.workers} worker(s)` }),
      el('span', { text: `${status.clients} trainer(s)` }),
      el('span', { text: `leases ${status.leases_granted} granted, ${status.lease_expiries} expired` }),
      el('span', { text: `splits ${status.splits.pending} pending · ${status.splits.leased} leased · ` +
                         `${status.splits.done} done` }));
    banner(status.failure ? 'The master\'s journal failed: ' + status.failure : '');

    const box = $('jobs');
    box.replaceChildren(...(jobs.length ? jobs.map(jobCard)
                                        : [el('p', { class: 'empty', text: 'no job yet' })]));

    $('workers').tBodies[0].replaceChildren(...workers.map((w) => el('tr', { 'data-worker': w.id },
      el('td', { text: w.id }), el('td', { text: w.job }),
      el('td', { text: w.connected ? 'yes' : 'no' }),
      el('td', { class: 'num', text: String(w.leases) }),
      el('td', { class: 'num', text: fmtPct(w.busy) }),
      el('td', { class: 'num', text: String(w.queued_batches) }),
      el('td', { class: 'num', text: fmtBytes(w.memory_used) }),
      el('td', { class: 'num', text: fmtNum(w.samples_sent) }),
      el('td', { class: 'num', text: (w.last_heartbeat_ms_ago / 1000).toFixed(1) + ' s ago' }))));

    $('decisions').tBodies[0].replaceChildren(...decisionsOf(jobs).map((d) =>
      el('tr', {}, el('td', { text: new Date(d.t * 1000).toLocaleTimeString() }),
        el('td', { text: d.job }),
        el('td', { class: 'num', text: `${d.from} → ${d.to}` }),
        el('td', { text: d.by }), el('td', { text: d.reason }))));
  }

  async function pollMaster(status) {
    const [jobs, workers] = await Promise.all([getJSON('/jobs'), getJSON('/workers')]);
    await refreshHistories(jobs.jobs || [], Date.now());
    renderMaster(status, jobs.jobs || [], workers.workers || []);
  }

  /* ---- a worker's page ------------------------------------------------------------- */

  const wRate = new Rate();
  const wBusyQueue = new Series();

  function renderWorker(st, now) {
    $('name').textContent = st.worker_id || '';
    const state = st.state || 'waiting';
    $('summary').replaceChildren(
      el('span', { class: 'state state-' + state, text: state }),
      el('span', { text: st.job_id ? 'job ' + st.job_id : 'no lease yet' }),
      el('span', { text: st.threads != null ? `${st.threads} thread(s)` : '' }));
    banner(st.error ? st.error : '');
    if (st.samples == null) return; /* waiting for the master's first lease */
    wRate.update(st.server.samples_acked, now); /* delivered to trainers, not just produced */
    wBusyQueue.push(st.server.ready);
    $('charts').replaceChildren(
      chart('samples/s delivered', wRate.series, { name: 'rate', fmt: fmtNum }),
      chart('batches ready', wBusyQueue, { name: 'ready', fmt: fmtNum }));
    const mem = st.memory;
    $('memory').replaceChildren(
      el('div', { class: 'progress-label',
                  text: `memory ${fmtBytes(mem.used)} of ${fmtBytes(mem.limit)} (peak ${fmtBytes(mem.peak)})` }),
      el('progress', { max: String(Math.max(mem.limit, 1)), value: String(mem.used) }));
    const m = st.master || {};
    $('figures').replaceWith(Object.assign(figures([
      ['splits read', fmtNum(st.splits) + (st.splits_failed ? ` (${st.splits_failed} failed)` : '')],
      ['rows read / kept', `${fmtNum(st.rows_read)} / ${fmtNum(st.rows_kept)}`],
      ['batches / samples', `${fmtNum(st.batches)} / ${fmtNum(st.samples)}`],
      ['bytes encoded', fmtBytes(st.bytes_encoded)],
      ['sent / acked', `${fmtNum(st.server.batches_sent)} / ${fmtNum(st.server.batches_acked)} batches`],
      ['trainers', String(st.server.clients)],
      ['leases', m.leases != null ? `${m.leases_held} held · ${m.leases} granted · ${m.revoked} revoked` : '–'],
      ['master', m.heartbeats != null ? `${m.heartbeats} heartbeats · ${m.reconnects} reconnects` +
                                        (m.stop ? ' · retired' : '') : '–'],
    ]), { id: 'figures' }));
    const groups = st.dedup_groups || [];
    if (!groups.length) {
      $('groups').tBodies[0].replaceChildren(
        el('tr', {}, el('td', { colspan: '4', class: 'empty', text: 'the job dedups no feature group' })));
      return;
    }
    $('groups').tBodies[0].replaceChildren(...groups.map((g) => el('tr', {},
      el('td', { text: g.name }), el('td', { class: 'num', text: fmtNum(g.rows) }),
      el('td', { class: 'num', text: fmtNum(g.unique_rows) }),
      el('td', { class: 'num', text: g.factor.toFixed(2) + '×' }))));
  }

  /* ---- the loop -------------------------------------------------------------------- */

  let page = null; /* 'master' or 'worker', from the first GET /status */
  let timer = null;

  /* A master's /status has its uptime, a worker's its own state: one page
   * serves both endpoints. */
  function choosePage(status) {
    page = 'uptime_s' in status ? 'master' : 'worker';
    document.body.dataset.page = page;
    document.title = $('kind').textContent = 'sluice ' + page;
    $(page).hidden = false;
  }

  async function poll() {
    clearTimeout(timer);
    try {
      const status = await getJSON('/status');
      if (!page) choosePage(status);
      if (page === 'master') await pollMaster(status);
      else renderWorker(status, Date.now());
      updated();
      showTokenBox(false); /* the renderers set or clear the banner */
    } catch (e) {
      if (e instanceof AuthNeeded) showTokenBox(true);
      banner(e.message || String(e));
    }
    timer = setTimeout(poll, intervalS * 1000);
  }

  $('interval').textContent = String(intervalS);
  wireTokenBox();
  poll();
})();
