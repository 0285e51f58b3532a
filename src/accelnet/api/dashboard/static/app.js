// accelnet dashboard: plain JavaScript, no dependencies, nothing fetched from elsewhere.
//
// Data: the REST API under /api/v1 (docs/api.md), with the token the user typed in
// (kept in sessionStorage, sent as "Authorization: Bearer"). Live updates: the server's
// event stream (GET /api/v1/events, Accept: text/event-stream), read with fetch() because
// EventSource cannot send the Authorization header; every event schedules a refresh.
// Readings that change without an event (utilization, power, temperature), logs and an
// open service page are polled; when the stream is down, everything is polled every 2 s.
//
// Every value from the server goes into the page as text (textContent, attributes),
// never as HTML: job names, details and logs are written by users.
//
// Modules: dom.js (helpers), fabric.js (the map), views.js (tables, job and service
// pages), this one (state, the API, signing in, routing, refreshing, live updates).

import { $, clear, now, sleep, toast } from './dom.js';
import { drawFabric, linkKey, paintFabric, renderLegend } from './fabric.js';
import { COMPACT_AT, drawHeatmap, hostFabric, paintHeatmap, sparkline } from './heatmap.js';
import {
  ACTIVE, FINISHED, QUEUED, focusDevice, renderActivity, renderDevices, renderJob,
  renderQueue, renderService, renderServices, renderTenants,
} from './views.js';

const API = '/api/v1';
const TOKEN_KEY = 'accelnet.token';
const POLL_LIVE_MS = 5000;   // telemetry refresh while the stream is up
const POLL_DOWN_MS = 2000;   // everything, while the stream is down
const LOG_POLL_MS = 1000;    // a running job's log
const SERVICE_POLL_MS = 1000; // an open service page (its latency chart)
const SPARK_KEEP = 120;      // latency points kept for a service page's chart
const MIN_REFRESH_MS = 1000; // between two refreshes
const LOG_KEEP = 256 * 1024; // characters of log kept on the page
const ACTIVITY_KEEP = 40;
const RECENT_KEEP = 50;      // finished jobs listed
const HISTORY_KEEP = 120;    // overview refreshes kept for the sparklines

const state = {
  token: null,
  who: null,
  fabric: null,
  map: null,          // the drawn fabric: {nodes: Map(id -> svg group), links: [...]}
  heat: null,         // the compact view (large fabrics): {cells, hosts}
  mode: 'full',       // which the overview shows: 'full' (the map) or 'compact'
  drill: null,        // the host whose map is open under the compact view
  drillMap: null,
  deviceView: { filter: '', sort: { key: 'id', dir: 1 } },
  jobFilter: '',
  history: [],        // [{busy, util, queued}] per overview refresh, oldest first
  devices: [],
  active: [],
  recent: [],
  tenants: [],
  services: [],
  linkUse: null,      // Map("a|b" -> utilization 0..1) from /metrics, when it has them
  metricsRetryAt: 0,
  activity: [],
  lastSeq: 0,
  view: 'overview',
  jobId: null,
  job: null,
  log: { key: '', offset: 0, attempt: 0, text: '' },
  svc: null,          // the open service page: {tenant, name, key}
  service: null,      // its latest answer
  spark: [],          // its polled latencies: [{t, p50, p95}], oldest first
  stream: null,       // AbortController of the event stream
  live: 'off',
  timers: [],
  refreshTimer: null,
  lastRefresh: 0,
  refreshing: false,
  refreshAgain: false,
};

// ----- the API --------------------------------------------------------------------------

class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** fetch() an API path with the token; JSON (or the Response, with raw: true). A 401
 * ends the session (back to the sign-in form, saying why). */
async function api(path, options) {
  const opts = options || {};
  const headers = { Authorization: `Bearer ${state.token}`, ...(opts.headers || {}) };
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(path.startsWith('/') ? path : `${API}/${path}`, {
    method: opts.method || 'GET',
    headers,
    body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    cache: 'no-store',
    signal: opts.signal,
  });
  if (res.ok) return opts.raw ? res : res.json();
  let code = 'error';
  let message = `${res.status} ${res.statusText}`;
  try {
    const body = await res.json();
    if (body && body.error) ({ code, message } = body.error);
  } catch (_) { /* not JSON */ }
  if (res.status === 401 && !opts.quiet) signOut(`The server refused the token: ${message}`);
  throw new ApiError(res.status, code, message);
}

// ----- sign in and out ------------------------------------------------------------------

async function signIn(token) {
  state.token = token;
  const who = await api('whoami', { quiet: true });
  state.who = who;
  sessionStorage.setItem(TOKEN_KEY, token);
  $('#whoami').textContent = `${who.name || who.token_id} · ${who.tenant} · ${who.role}`;
  $('#logout').hidden = false;
  document.body.dataset.role = who.role;
  for (const el of document.querySelectorAll('.admin-only')) el.hidden = who.role !== 'admin';
  $('#login').hidden = true;
  startLive();
  route();
}

function signOut(why) {
  stopLive();
  sessionStorage.removeItem(TOKEN_KEY);
  Object.assign(state, {
    token: null, who: null, fabric: null, map: null, devices: [], active: [], recent: [],
    tenants: [], services: [], activity: [], lastSeq: 0, job: null, linkUse: null,
    metricsRetryAt: 0, svc: null, service: null, spark: [], heat: null, drill: null,
    drillMap: null, history: [],
  });
  for (const sel of ['#fabric-map', '#fabric-heatmap', '#fabric-drill-map']) clear($(sel));
  clear($('#activity'));
  $('#whoami').textContent = '';
  $('#fabric-name').textContent = '';
  $('#logout').hidden = true;
  $('#overview').hidden = true;
  $('#job-page').hidden = true;
  $('#service-page').hidden = true;
  $('#login').hidden = false;
  $('#login-error').textContent = why || '';
  $('#token-input').value = '';
  $('#token-input').focus();
}

function setupLogin() {
  $('#login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const token = $('#token-input').value.trim();
    $('#login-error').textContent = '';
    try {
      await signIn(token);
    } catch (err) {
      state.token = null;
      $('#login-error').textContent = err instanceof ApiError
        ? `Not signed in: ${err.message}` : `Cannot reach the server: ${err.message}`;
    }
  });
  $('#logout').addEventListener('click', () => signOut(''));
}

// ----- routing: #/ (overview), #/jobs/<id>, #/services/<tenant>/<name> ------------------

function route() {
  if (!state.token) return;
  const m = location.hash.match(/^#\/jobs\/(.+)$/);
  const sm = location.hash.match(/^#\/services\/([^/]+)\/([^/]+)$/);
  if (sm) {
    state.view = 'service';
    state.jobId = null;
    const svc = { tenant: decodeURIComponent(sm[1]), name: decodeURIComponent(sm[2]) };
    svc.key = `${svc.tenant}/${svc.name}`;
    if (!state.svc || state.svc.key !== svc.key) {
      Object.assign(state, { svc, service: null, spark: [] });
      for (const sel of ['#service-facts', '#service-chart', '#service-latency',
        '#service-replicas tbody', '#service-events tbody']) clear($(sel));
      $('#service-replicas-summary').textContent = '';
      $('#service-title').textContent = svc.name;
      $('#service-state').textContent = '';
      $('#service-state').className = 'badge';
      for (const sel of ['#service-error', '#service-stop']) $(sel).hidden = true;
    }
  } else if (m) {
    state.view = 'job';
    Object.assign(state, { svc: null, service: null, spark: [] });
    const id = decodeURIComponent(m[1]);
    if (id !== state.jobId) {
      state.jobId = id;
      state.job = null;
      state.log = { key: '', offset: 0, attempt: 0, text: '', chosen: false };
      clear($('#job-log'));
      clear($('#log-rank'));
      clear($('#log-attempt'));
      clear($('#job-timeline tbody'));
      clear($('#job-timeline-bar'));
      clear($('#job-facts'));
      $('#job-title').textContent = id;
      $('#job-state').textContent = '';
      $('#job-state').className = 'badge';
      for (const sel of ['#job-error', '#job-reason', '#job-cancel']) $(sel).hidden = true;
    }
  } else {
    state.view = 'overview';
    state.jobId = null;
    Object.assign(state, { svc: null, service: null, spark: [] });
  }
  $('#overview').hidden = state.view !== 'overview';
  $('#job-page').hidden = state.view !== 'job';
  $('#service-page').hidden = state.view !== 'service';
  refreshSoon(0, true);
}

// ----- refreshing -------------------------------------------------------------------------

/** Refresh what the current view shows after ``ms``: one refresh at a time, and at
 * most one a second unless ``urgent`` (the user asked for it): a busy cluster's events
 * would ask for more, and the API's rate limit is per token, shared by every tab. */
function refreshSoon(ms, urgent) {
  if (urgent && state.refreshTimer !== null) {  // the user asked for something else: now
    clearTimeout(state.refreshTimer);
    state.refreshTimer = null;
  }
  if (state.refreshTimer !== null) return;
  const wait = urgent ? ms : Math.max(ms, state.lastRefresh + MIN_REFRESH_MS - Date.now());
  state.refreshTimer = setTimeout(() => {
    state.refreshTimer = null;
    refresh();
  }, wait);
}

async function refresh() {
  if (!state.token) return;
  if (state.refreshing) { state.refreshAgain = true; return; }
  state.refreshing = true;
  state.lastRefresh = Date.now();
  try {
    if (state.view === 'job') await refreshJob();
    else if (state.view === 'service') await refreshService();
    else await refreshOverview();
  } catch (err) {
    if (!(err instanceof ApiError && err.status === 401)) {
      console.warn('refresh failed:', err.message);
    }
  } finally {
    state.refreshing = false;
    if (state.refreshAgain) { state.refreshAgain = false; refreshSoon(0); }
  }
}

async function refreshOverview() {
  const [fabric, devices, active, recent, tenants, services] = await Promise.all([
    state.fabric ? Promise.resolve(state.fabric) : api('fabric'),
    api('devices'),
    api(`jobs?state=${ACTIVE.join(',')}&limit=500`),
    api(`jobs?state=${FINISHED.join(',')}&limit=${RECENT_KEEP}`),
    api('tenants'),
    api('services'),
  ]);
  await refreshLinkUse();
  if (!state.token || state.view !== 'overview') return;  // signed out, or moved on
  if (!state.fabric) {
    state.fabric = fabric;
    const count = fabric.hosts.reduce((n, host) => n + host.devices.length, 0);
    setMode(count > COMPACT_AT ? 'compact' : 'full');
    const sum = fabric.summary || {};
    $('#fabric-name').textContent = `fabric ${fabric.name}`;
    $('#fabric-summary').textContent = [
      `${sum.hosts ?? fabric.hosts.length} hosts`,
      `${sum.devices ?? count} devices`,
      `${sum.switches ?? fabric.switches.length} switches`,
    ].join(' · ');
  }
  state.devices = devices.devices;
  state.active = active.jobs;
  state.recent = recent.jobs;
  state.tenants = tenants.tenants;
  state.services = services.services;
  paintOverview();
  renderDevices(state.devices, state.who.role === 'admin', deviceOp, state.deviceView);
  renderQueue(state.active, state.recent, state.jobFilter);
  renderServices(state.services);
  renderTenants(state.tenants);
  renderActivity(state.activity);
  remember();
}

/** Colour what the fabric card shows (the map, or the compact view and an open host). */
function paintOverview() {
  if (state.map) paintFabric(state.map, state.devices, state.linkUse, null);
  if (state.heat) paintHeatmap(state.heat, state.devices);
  if (state.drillMap) paintFabric(state.drillMap, state.devices, state.linkUse, null);
  const shown = state.mode === 'full' ? state.map : state.drillMap;
  renderLegend($('#fabric-legend'), shown || { links: [] }, shown ? state.linkUse : null);
}

/** Show the full map or the compact view, drawing it the first time it is asked for. */
function setMode(mode) {
  state.mode = mode;
  const fabric = state.fabric;
  if (mode === 'full' && !state.map) state.map = drawFabric($('#fabric-map'), fabric, focusDevice);
  if (mode === 'compact' && !state.heat) {
    state.heat = drawHeatmap($('#fabric-heatmap'), fabric, openHost);
  }
  $('#fabric-map').hidden = mode !== 'full';
  $('#fabric-heatmap').hidden = mode !== 'compact';
  $('#fabric-drill').hidden = mode !== 'compact' || !state.drill;
  $('#fabric-full').setAttribute('aria-pressed', String(mode === 'full'));
  $('#fabric-compact').setAttribute('aria-pressed', String(mode === 'compact'));
  if (state.devices.length) paintOverview();
}

/** Drill down into one host of the compact view: its full map below, its devices in the
 * table (the device filter set to it); null closes it. */
function openHost(name) {
  for (const g of document.querySelectorAll('#fabric-heatmap .hm-host.open')) g.classList.remove('open');
  state.drill = name;
  state.drillMap = null;
  $('#fabric-drill').hidden = !name;
  if (name) {
    const part = hostFabric(state.fabric, name);
    state.drillMap = drawFabric($('#fabric-drill-map'), part, focusDevice);
    $('#drill-title').textContent = `host ${name}`;
    const g = state.heat && state.heat.hosts.get(name);
    if (g) g.classList.add('open');
  } else {
    clear($('#fabric-drill-map'));
  }
  setDeviceFilter(name ? `${name}/` : '');
  paintOverview();
}

function setDeviceFilter(text) {
  state.deviceView.filter = text;
  $('#device-filter').value = text;
  renderDevices(state.devices, state.who.role === 'admin', deviceOp, state.deviceView);
}

/** Add this refresh to the history (busy devices, their mean utilization, queued jobs)
 * and draw the sparklines. */
function remember() {
  const busy = state.devices.filter((d) => d.busy || d.state === 'allocated');
  const utils = busy.map((d) => d.utilization_pct).filter((u) => u !== null && u !== undefined);
  const mean = utils.length ? utils.reduce((p, q) => p + q, 0) / utils.length : 0;
  const queued = state.active.filter((j) => QUEUED.includes(j.state)).length;
  state.history.push({ busy: busy.length, util: mean, queued });
  if (state.history.length > HISTORY_KEEP) state.history.shift();
  const col = (k) => state.history.map((p) => p[k]);
  sparkline($('#hist-busy'), col('busy'), 'busy devices', (v) => String(v));
  sparkline($('#hist-util'), col('util'), 'their utilization', (v) => `${v.toFixed(0)}%`);
  sparkline($('#hist-queued'), col('queued'), 'queued jobs', (v) => String(v));
}

function setupOverview() {
  $('#fabric-full').addEventListener('click', () => setMode('full'));
  $('#fabric-compact').addEventListener('click', () => setMode('compact'));
  $('#drill-close').addEventListener('click', () => openHost(null));
  $('#device-filter').addEventListener('input', (ev) => setDeviceFilter(ev.target.value));
  $('#job-filter').addEventListener('input', (ev) => {
    state.jobFilter = ev.target.value;
    renderQueue(state.active, state.recent, state.jobFilter);
  });
  for (const th of document.querySelectorAll('#device-table th[data-sort]')) {
    th.addEventListener('click', () => {
      const sort = state.deviceView.sort;
      state.deviceView.sort = { key: th.dataset.sort, dir: sort.key === th.dataset.sort ? -sort.dir : 1 };
      renderDevices(state.devices, state.who.role === 'admin', deviceOp, state.deviceView);
    });
  }
}

/** Link utilization from /metrics (accelnet_link_utilization), if the server exports
 * it there and lets this token read it; otherwise links are coloured by medium. */
async function refreshLinkUse() {
  if (now() < state.metricsRetryAt) return;
  try {
    const res = await fetch('/metrics', {
      headers: { Authorization: `Bearer ${state.token}` }, cache: 'no-store',
    });
    if (!res.ok) throw new Error(String(res.status));
    const text = await res.text();
    const use = new Map();
    const re = /^accelnet_link_utilization\{([^}]*)\}\s+(\S+)/gm;
    for (let m = re.exec(text); m; m = re.exec(text)) {
      const labels = {};
      for (const l of m[1].matchAll(/(\w+)="((?:[^"\\]|\\.)*)"/g)) labels[l[1]] = l[2];
      const value = Number(m[2]);
      if (!labels.src || !labels.dst || !Number.isFinite(value)) continue;
      const key = linkKey(labels.src, labels.dst);
      use.set(key, Math.max(use.get(key) || 0, value));
    }
    state.linkUse = text.includes('accelnet_link_utilization') ? use : null;
    state.metricsRetryAt = now() + 4;  // a scrape reads the whole cluster: not too often
  } catch (_) {
    state.linkUse = null;
    state.metricsRetryAt = now() + 60;  // not exported here (or not to us): look again later
  }
}

async function deviceOp(id, op) {
  if (op === 'drain' && !window.confirm(`Drain ${id}? No new work goes to it; its jobs finish.`)) return;
  try {
    const out = await api(`devices/${id}/${op}`, {
      method: 'POST', body: { reason: `from the dashboard (${state.who.name || state.who.token_id})` },
    });
    toast(out.answer ? `${id}: ${out.answer.detail}` : `${id}: ${op} asked; it goes on`,
      out.answer && !out.answer.ok ? 'error' : 'info');
  } catch (err) {
    toast(`${id}: ${op} refused: ${err.message}`, 'error');
  }
  refreshSoon(0, true);
}

// ----- the job page -----------------------------------------------------------------------

async function refreshJob() {
  const id = state.jobId;
  let job;
  try {
    job = await api(`jobs/${encodeURIComponent(id)}`);
  } catch (err) {
    if (err instanceof ApiError && err.status === 404) {
      $('#job-title').textContent = id;
      $('#job-state').textContent = 'not found';
      $('#job-error').hidden = false;
      $('#job-error').textContent = err.message;
      return;
    }
    throw err;
  }
  if (id !== state.jobId) return;
  const events = await api(`jobs/${encodeURIComponent(id)}/events`);
  if (id !== state.jobId) return;
  state.job = job;
  renderJob(job, events.events, state.who.role);
  await refreshLog(job);
}

async function refreshLog(job) {
  const rank = $('#log-rank').value || '0';
  if (!state.log.chosen) {  // a failed job opens on what it said on stderr
    $('#log-stream').value = job.state === 'failed' ? 'err' : 'out';
  }
  const stream = $('#log-stream').value || 'out';
  const pick = $('#log-attempt').value;  // '' : the latest attempt
  const key = `${job.id}|${rank}|${stream}|${pick}`;
  if (state.log.key !== key) {
    state.log = { key, offset: 0, attempt: 0, text: '', chosen: state.log.chosen };
  }
  if (!job.attempts) {
    $('#log-info').textContent = 'no attempt yet';
    return;
  }
  const res = await api(
    `jobs/${encodeURIComponent(job.id)}/logs?rank=${rank}&stream=${stream}` +
      `&offset=${state.log.offset}${pick ? `&attempt=${pick}` : ''}`,
    { raw: true },
  );
  const text = await res.text();
  if (state.log.key !== key) return;
  const attempt = Number(res.headers.get('X-Accelnet-Attempt') || 0);
  const offset = Number(res.headers.get('X-Accelnet-Offset') || 0);
  if (state.log.attempt && attempt !== state.log.attempt) {
    // a new attempt: its log starts at 0
    state.log.text += `\n[accelnet] attempt ${attempt}\n`;
    state.log.offset = 0;
    state.log.attempt = attempt;
    return refreshLog(job);
  }
  state.log.attempt = attempt;
  state.log.offset = offset;
  if (text) {
    const pre = $('#job-log');
    const atBottom = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;
    state.log.text = (state.log.text + text).slice(-LOG_KEEP);
    pre.textContent = state.log.text;
    if (atBottom) pre.scrollTop = pre.scrollHeight;
  }
  $('#log-info').textContent = `attempt ${attempt} · std${stream} · ${offset} bytes${
    FINISHED.includes(job.state) || pick ? '' : ' · following'}`;
}

function setupJobPage() {
  const reset = () => {
    state.log.key = '';
    clear($('#job-log'));
    refreshSoon(0, true);
  };
  $('#log-rank').addEventListener('change', reset);
  $('#log-attempt').addEventListener('change', reset);
  $('#log-stream').addEventListener('change', () => {
    state.log.chosen = true;  // the user's choice stands over the failed job's default
    reset();
  });
  $('#job-cancel').addEventListener('click', async () => {
    const id = state.jobId;
    if (!window.confirm(`Cancel job ${id}?`)) return;
    try {
      await api(`jobs/${encodeURIComponent(id)}/cancel`, { method: 'POST' });
      toast(`${id}: cancel asked`);
    } catch (err) {
      toast(`${id}: ${err.message}`, 'error');
    }
    refreshSoon(0, true);
  });
}

// ----- the service page -------------------------------------------------------------------

const servicePath = (svc) =>
  `services/${encodeURIComponent(svc.name)}?tenant=${encodeURIComponent(svc.tenant)}`;

/** Whoever may stop a service: an admin, or a user of its tenant (as the API says). */
const mayStop = (svc) => state.who.role === 'admin'
  || (state.who.role !== 'viewer' && state.who.tenant === svc.tenant);

/** Poll the open service and add its latencies to the chart's points (the newest
 * SPARK_KEEP: about two minutes at one poll a second). */
async function refreshService() {
  const svc = state.svc;
  let sv;
  try {
    sv = await api(servicePath(svc));
  } catch (err) {
    if (err instanceof ApiError && err.status === 404 && svc === state.svc) {
      for (const sel of ['#service-facts', '#service-chart', '#service-latency',
        '#service-replicas tbody', '#service-events tbody']) clear($(sel));
      $('#service-title').textContent = svc.name;
      $('#service-state').textContent = 'not found';
      $('#service-state').className = 'badge';
      $('#service-stop').hidden = true;
      $('#service-error').hidden = false;
      $('#service-error').textContent = err.message;
      return;
    }
    throw err;
  }
  if (svc !== state.svc) return;  // moved on
  state.service = sv;
  state.spark.push({ t: Date.now(), p50: sv.stats.p50_ms, p95: sv.stats.p95_ms });
  if (state.spark.length > SPARK_KEEP) state.spark.splice(0, state.spark.length - SPARK_KEEP);
  $('#service-error').hidden = true;
  renderService(sv, state.spark, SPARK_KEEP, mayStop(svc));
}

function setupServicePage() {
  const stop = $('#service-stop');
  stop.addEventListener('click', async () => {
    const svc = state.svc;
    if (!svc || !window.confirm(`Stop service ${svc.key}? Its router closes and its replicas' `
      + 'jobs are cancelled.')) return;
    stop.disabled = true;
    try {
      await api(servicePath(svc), { method: 'DELETE' });
      toast(`${svc.key}: stopped`);
      if (svc === state.svc) location.hash = '#/';
    } catch (err) {
      toast(`${svc.key}: ${err.message}`, 'error');
      refreshSoon(0, true);
    } finally {
      stop.disabled = false;
    }
  });
}

// ----- live updates -------------------------------------------------------------------------

function setLive(mode) {
  state.live = mode;
  const el = $('#live-status');
  el.dataset.live = mode;
  el.textContent = { live: 'live', polling: 'polling', off: 'offline' }[mode];
  el.title = mode === 'live' ? 'live: the server streams its events'
    : mode === 'polling' ? 'the event stream is down: polling every 2 s' : 'not connected';
}

function onEvent(ev) {
  state.lastSeq = Math.max(state.lastSeq, ev.seq);
  state.activity.push(ev);
  if (state.activity.length > ACTIVITY_KEEP) state.activity.splice(0, state.activity.length - ACTIVITY_KEEP);
  if (state.view === 'overview' || ev.job === state.jobId) refreshSoon(100);
}

/** Catch up with the event log (to learn where it ends; the last few feed "Activity"). */
async function catchUp(signal) {
  for (;;) {
    const page = await api(`events?since=${state.lastSeq}&limit=5000`, { signal });
    const tail = page.events.slice(-ACTIVITY_KEEP);
    state.activity = state.activity.concat(tail).slice(-ACTIVITY_KEEP);
    state.lastSeq = Math.max(state.lastSeq, page.next);
    if (page.events.length < 5000) return;
  }
}

/** Read the event stream; on its end or an error, poll and reconnect (with
 * Last-Event-ID, through ?since=, so no event is missed). */
async function streamLoop(ctrl) {
  let retry = 2000;
  while (!ctrl.signal.aborted) {
    try {
      if (!state.lastSeq) await catchUp(ctrl.signal);
      const res = await api(`events?since=${state.lastSeq}`, {
        headers: { Accept: 'text/event-stream' }, signal: ctrl.signal, raw: true,
      });
      if (!res.body) throw new Error('no stream body');
      setLive('live');
      refreshSoon(0);
      const reader = res.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
        let cut;
        while ((cut = buf.indexOf('\n\n')) >= 0) {
          const block = buf.slice(0, cut);
          buf = buf.slice(cut + 2);
          const data = [];
          for (const line of block.split('\n')) {
            if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
            else if (line.startsWith('retry:')) retry = Number(line.slice(6)) || retry;
          }
          if (data.length) {
            try { onEvent(JSON.parse(data.join('\n'))); } catch (_) { /* not an event */ }
          }
        }
      }
    } catch (err) {
      if (ctrl.signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) return;
    }
    if (ctrl.signal.aborted) return;
    setLive('polling');
    await sleep(retry);
  }
}

function startLive() {
  stopLive();
  const ctrl = new AbortController();
  state.stream = ctrl;
  setLive('polling');
  streamLoop(ctrl);
  let last = 0;
  state.timers.push(setInterval(() => {
    const t = Date.now();
    const every = state.live === 'live' ? POLL_LIVE_MS : POLL_DOWN_MS;
    if (t - last >= every) { last = t; refreshSoon(0); }
  }, 500));
  state.timers.push(setInterval(() => {
    if (state.view === 'job' && state.job && !FINISHED.includes(state.job.state)) refreshSoon(0);
  }, LOG_POLL_MS));
  state.timers.push(setInterval(() => {
    if (state.view === 'service') refreshSoon(0);
  }, SERVICE_POLL_MS));
}

function stopLive() {
  if (state.stream) state.stream.abort();
  state.stream = null;
  for (const t of state.timers) clearInterval(t);
  state.timers = [];
  setLive('off');
}

// ----- start --------------------------------------------------------------------------------

function start() {
  setupLogin();
  setupOverview();
  setupJobPage();
  setupServicePage();
  window.addEventListener('hashchange', route);
  const saved = sessionStorage.getItem(TOKEN_KEY);
  if (saved) resume(saved);
  else signOut('');
}

/** Sign in again with the tab's token (after a reload); while the server cannot be
 * reached, try again every 3 s (a refused token goes back to the form). */
function resume(saved) {
  signIn(saved).catch((err) => {
    state.token = null;
    if (err instanceof ApiError) { signOut(`Sign in again: ${err.message}`); return; }
    $('#login').hidden = false;
    $('#login-error').textContent = `Cannot reach the server (${err.message}); trying again…`;
    setTimeout(() => {
      if (!state.token && sessionStorage.getItem(TOKEN_KEY) === saved) resume(saved);
    }, 3000);
  });
}

start();  // a module runs once the document is parsed
