// The tables, the job page and the service page: render functions over the API's
// answers (no fetching).

import {
  $, clear, dash, fmtAge, fmtBytes, fmtNum, fmtTime, h, jobHref, now, s, serviceHref,
} from './dom.js';

export const QUEUED = ['pending', 'admitted'];
export const ACTIVE = ['pending', 'admitted', 'starting', 'running', 'preempting'];
export const FINISHED = ['succeeded', 'failed', 'cancelled'];

function badge(text, kind) {
  return h('span', { class: `badge ${kind || ''}`, 'data-value': text }, text);
}

function jobLinks(ids) {
  if (!ids.length) return dash;
  return ids.flatMap((id, i) => [i ? ', ' : null, h('a', { href: jobHref(id) }, id)]);
}

export const DEVICE_ROWS = 100;  // rows the device table shows at most (filter for more)

/** Whether ``text`` (a filter as typed: words, all of which must match) matches any of
 * ``fields`` (case-insensitive). */
export function matches(text, fields) {
  const words = (text || '').toLowerCase().split(/\s+/).filter(Boolean);
  if (!words.length) return true;
  const hay = fields.filter((f) => f !== null && f !== undefined).join(' ').toLowerCase();
  return words.every((w) => hay.includes(w));
}

const DEVICE_KEYS = {
  id: (d) => d.id, model: (d) => d.model, state: (d) => d.state, health: (d) => d.health,
  util: (d) => d.utilization_pct ?? -1, memory: (d) => d.memory_used_bytes ?? -1,
  power: (d) => d.power_w ?? -1, temp: (d) => d.temperature_c ?? -1,
  jobs: (d) => d.jobs.join(','),
};

/** The device table: ``view`` = {filter, sort: {key, dir}}; at most DEVICE_ROWS rows. */
export function renderDevices(devices, admin, onOp, view) {
  const tbody = clear($('#device-table tbody'));
  const counts = {};
  for (const d of devices) counts[d.state] = (counts[d.state] || 0) + 1;
  const { filter, sort } = view || { filter: '', sort: { key: 'id', dir: 1 } };
  const key = DEVICE_KEYS[sort.key] || DEVICE_KEYS.id;
  const shown = devices
    .filter((d) => matches(filter, [d.id, d.host, d.model, d.state, d.phase, d.health, ...d.jobs]))
    .sort((a, b) => {
      const x = key(a), y = key(b);
      return (x < y ? -1 : x > y ? 1 : 0) * sort.dir || a.id.localeCompare(b.id);
    });
  for (const th of document.querySelectorAll('#device-table th[data-sort]')) {
    th.dataset.dir = th.dataset.sort === sort.key ? (sort.dir > 0 ? 'asc' : 'desc') : '';
  }
  for (const d of shown.slice(0, DEVICE_ROWS)) {
    const util = d.utilization_pct;
    const mem = d.memory_total_bytes
      ? `${fmtBytes(d.memory_used_bytes) ?? '?'} / ${fmtBytes(d.memory_total_bytes)} GiB` : dash;
    const actions = [];
    if (admin) {
      const draining = d.state === 'draining' || d.state === 'drained';
      actions.push(h('button', {
        type: 'button',
        class: draining ? 'small undrain' : 'small drain',
        'data-op': draining ? 'undrain' : 'drain',
        onclick: () => onOp(d.id, draining ? 'undrain' : 'drain'),
      }, draining ? 'undrain' : 'drain'));
    }
    tbody.append(h('tr', { 'data-device': d.id, 'data-state': d.state },
      h('td', { class: 'mono' }, d.id),
      h('td', {}, d.model),
      h('td', { class: 'state' }, badge(d.state, `st-${d.state}`),
        d.phase && d.phase !== 'healthy' ? h('span', { class: 'muted' }, ` ${d.phase}`) : null),
      h('td', { class: 'health' }, badge(d.health, `health-${d.health}`)),
      h('td', { class: 'num util' }, util === null || util === undefined ? dash
        : h('span', { class: 'bar', title: `${util.toFixed(1)} %` },
          h('i', { 'data-pct': Math.max(0, Math.min(100, util)) }), h('b', {}, `${util.toFixed(0)} %`))),
      h('td', { class: 'num' }, mem),
      h('td', { class: 'num power' }, fmtNum(d.power_w, 0, 'W')),
      h('td', { class: 'num temp' }, fmtNum(d.temperature_c, 0, '°C')),
      h('td', { class: 'jobs' }, d.jobs.length ? jobLinks(d.jobs) : d.busy ? 'busy' : dash),
      admin ? h('td', { class: 'actions' }, actions) : null));
  }
  if (!shown.length) {
    tbody.append(h('tr', {}, h('td', { colspan: 10, class: 'muted' }, `no device matches “${filter}”`)));
  }
  for (const i of tbody.querySelectorAll('i[data-pct]')) i.style.width = `${i.dataset.pct}%`;
  const more = $('#device-more');
  more.hidden = shown.length <= DEVICE_ROWS;
  more.textContent = `showing ${DEVICE_ROWS} of ${shown.length}${filter ? ' matching' : ''}` +
    ' devices: filter (a host, a model, a state, a job) to see the others';
  $('#devices-summary').textContent = Object.entries(counts).sort()
    .map(([k, n]) => `${n} ${k}`).join(' · ') +
    (filter ? ` · ${shown.length} match “${filter}”` : '');
}

export function renderQueue(active, finished, filter) {
  const tbody = clear($('#queue-table tbody'));
  const t = now();
  const hit = (j) => matches(filter, [j.id, j.name, j.tenant, j.state, j.reason, j.error,
    ...(j.devices || [])]);
  // waiting jobs first (oldest first), then the running ones
  const jobs = active.filter(hit).sort((a, b) => {
    const qa = QUEUED.includes(a.state) ? 0 : 1, qb = QUEUED.includes(b.state) ? 0 : 1;
    return qa - qb || a.submitted_at - b.submitted_at;
  });
  for (const j of jobs) {
    const queued = QUEUED.includes(j.state);
    const where = queued
      ? h('span', { class: 'reason' }, j.reason || 'waiting for the next decision')
      : h('span', { class: 'mono where' }, j.devices.join(', ') || dash,
        j.share && j.share < 1 ? ` (${j.share} each)` : null);
    tbody.append(h('tr', { 'data-job': j.id, 'data-state': j.state },
      h('td', {}, h('a', { href: jobHref(j.id), class: 'job-link' }, j.name),
        h('div', { class: 'muted mono small' }, j.id)),
      h('td', {}, j.tenant),
      h('td', { class: 'state' }, badge(j.state, `st-${j.state}`)),
      h('td', {}, where),
      h('td', { class: 'num' }, fmtAge(t - (queued ? j.submitted_at : j.started_at || j.submitted_at)))));
  }
  if (!jobs.length) {
    tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' },
      filter ? `no queued or running job matches “${filter}”` : 'no queued or running jobs')));
  }
  const waiting = jobs.filter((j) => QUEUED.includes(j.state)).length;
  $('#queue-summary').textContent = `${waiting} waiting · ${jobs.length - waiting} running` +
    (filter ? ` (matching “${filter}”)` : '');

  const recent = clear($('#recent-table tbody'));
  const done = finished.filter(hit);
  $('#recent-summary').textContent = `(latest ${finished.length}` +
    `${filter ? `, ${done.length} matching` : ''})`;
  for (const j of done) {
    recent.append(h('tr', { 'data-job': j.id, 'data-state': j.state },
      h('td', {}, h('a', { href: jobHref(j.id) }, j.name)),
      h('td', {}, j.tenant),
      h('td', {}, badge(j.state, `st-${j.state}`)),
      h('td', { class: 'muted' }, j.error || (j.finished_at ? `${fmtAge(t - j.finished_at)} ago` : ''))));
  }
  if (!done.length) recent.append(h('tr', {}, h('td', { class: 'muted' }, filter ? 'none matches' : 'none yet')));
}

export function renderTenants(tenants) {
  const box = clear($('#tenants'));
  for (const tn of tenants) {
    const models = [...new Set([
      ...Object.keys(tn.quota), ...Object.keys(tn.usage), ...Object.keys(tn.committed),
    ])].sort((a, b) => (a === '*') - (b === '*') || a.localeCompare(b));
    // '*': all models together (the server sends it; else the sum of the models)
    const all = (o) => ('*' in o ? o['*']
      : Object.values(o).reduce((p, q) => p + q, 0));
    const rows = models.map((m) => {
      const used = m === '*' ? all(tn.usage) : tn.usage[m] || 0;
      const committed = m === '*' ? all(tn.committed) : tn.committed[m] || 0;
      const quota = tn.quota[m];
      const pct = quota ? Math.min(100, (100 * used) / quota) : 0;
      const pctCommitted = quota ? Math.min(100, (100 * committed) / quota) : 0;
      return h('tr', { 'data-model': m },
        h('td', {}, m === '*' ? 'all models' : m),
        h('td', { class: 'quota-bar' },
          quota === undefined ? h('span', { class: 'muted' }, 'no quota')
            : h('span', { class: 'bar wide', title: `committed ${committed} (running and queued)` },
              h('i', { class: 'committed', 'data-pct': pctCommitted }),
              h('i', { 'data-pct': pct }))),
        h('td', { class: 'num usage' },
          `${+used.toFixed(2)}${quota === undefined ? '' : ` / ${quota}`}`,
          committed > used ? h('span', { class: 'muted' }, ` (+${+(committed - used).toFixed(2)} queued)`) : null));
    });
    box.append(h('div', { class: 'tenant', 'data-tenant': tn.name },
      h('div', { class: 'tenant-head' }, h('b', {}, tn.name),
        h('span', { class: 'muted' }, ` weight ${tn.weight}`)),
      rows.length ? h('table', { class: 'table compact' }, h('tbody', {}, rows))
        : h('p', { class: 'muted small' }, 'no quota, nothing running')));
  }
  for (const i of box.querySelectorAll('i[data-pct]')) i.style.width = `${i.dataset.pct}%`;
}

export function renderActivity(activity) {
  const list = clear($('#activity'));
  for (const ev of activity.slice().reverse()) {
    list.append(h('li', { 'data-kind': ev.kind },
      h('span', { class: 'muted num' }, new Date(ev.at * 1000).toLocaleTimeString()), ' ',
      badge(ev.kind, `kind-${ev.kind.split(':')[0]}`), ' ',
      ev.job ? h('a', { href: jobHref(ev.job) }, ev.job) : null, ev.job ? ' ' : null,
      h('span', {}, ev.detail)));
  }
  if (!activity.length) list.append(h('li', { class: 'muted' }, 'nothing yet'));
}

export function focusDevice(id) {
  const row = document.querySelector(`#device-table tr[data-device="${CSS.escape(id)}"]`);
  if (!row) return;
  for (const r of document.querySelectorAll('#device-table tr.focus')) r.classList.remove('focus');
  row.classList.add('focus');
  row.scrollIntoView({ block: 'nearest', behavior: 'smooth' });
}

// ----- the job page ----------------------------------------------------------------------

export function renderJob(job, events, role) {
  $('#job-title').textContent = job.name;
  const st = $('#job-state');
  st.textContent = job.state;
  st.className = `badge st-${job.state}`;
  st.dataset.value = job.state;
  const res = job.spec && job.spec.resources ? job.spec.resources.accelerators : null;
  const ask = res && typeof res === 'object'
    ? `${res.count} x ${(res.models || ['any']).join(' | ')}${res.share && res.share < 1 ? ` (${res.share} each)` : ''}`
    : String(res || dash);
  const facts = [
    ['id', job.id], ['tenant', job.tenant], ['asks for', ask],
    ['devices', job.devices.length ? job.devices.join(', ') : dash],
    ['model', job.model || dash],
    ['submitted', fmtTime(job.submitted_at)], ['started', fmtTime(job.started_at)],
    ['finished', fmtTime(job.finished_at)],
    ['waited', job.started_at ? fmtAge(job.started_at - job.submitted_at)
      : job.finished_at ? fmtAge(job.finished_at - job.submitted_at)
        : `${fmtAge(now() - job.submitted_at)} so far`],
    ['ran', job.started_at ? fmtAge((job.finished_at || now()) - job.started_at) : dash],
    ['attempts', `${job.attempts}${job.failures ? ` (${job.failures} failed)` : ''}`],
    ['inputs', Object.entries(job.inputs).map(([k, v]) => `${k}: ${v}`).join(', ') || dash],
  ];
  const dl = clear($('#job-facts'));
  for (const [k, v] of facts) dl.append(h('div', {}, h('dt', {}, k), h('dd', { 'data-fact': k }, v)));
  const reason = $('#job-reason');
  reason.hidden = !job.reason;
  reason.textContent = job.reason ? `Waiting: ${job.reason}` : '';
  const error = $('#job-error');
  error.hidden = !job.error;
  error.textContent = job.error || '';
  const canCancel = role !== 'viewer' && !FINISHED.includes(job.state);
  $('#job-cancel').hidden = !canCancel;

  // timeline: how long the job spent in each state, then every event
  const bar = clear($('#job-timeline-bar'));
  const marks = events.filter((e) => e.kind.startsWith('job:') && e.kind.split(':')[1] !== 'inputs');
  const end = job.finished_at || now();
  const start = marks.length ? marks[0].at : job.submitted_at;
  const span = Math.max(end - start, 0.001);
  marks.forEach((e, i) => {
    const name = e.kind.slice(4);
    const until = i + 1 < marks.length ? marks[i + 1].at : FINISHED.includes(name) ? e.at : end;
    const seg = h('span', {
      class: `seg st-${name}`,
      'data-state': name,
      title: `${name}: ${fmtAge(until - e.at)} — ${e.detail}`,
    }, h('span', {}, name));
    seg.style.flexGrow = String(Math.max((until - e.at) / span, 0));
    bar.append(seg);
  });
  const tbody = clear($('#job-timeline tbody'));
  for (const e of events) {
    tbody.append(h('tr', { 'data-kind': e.kind },
      h('td', { class: 'num mono', title: fmtTime(e.at) }, `+${(e.at - start).toFixed(2)} s`),
      h('td', {}, badge(e.kind, `kind-${e.kind.split(':')[0]} st-${e.kind.split(':')[1] || ''}`)),
      h('td', {}, e.detail)));
  }

  const ranks = Math.max(1, job.devices.length, res && res.count ? Math.ceil(res.count) : 1);
  const sel = $('#log-rank');
  if (sel.options.length !== ranks) {
    const keep = sel.value;
    clear(sel);
    for (let r = 0; r < ranks; r++) sel.append(h('option', { value: r }, String(r)));
    sel.value = keep && Number(keep) < ranks ? keep : '0';
  }
  // the attempt whose log is shown: the latest (followed while it runs), or an earlier one
  const tries = $('#log-attempt');
  if (tries.options.length !== job.attempts + 1) {
    const keep = tries.value;
    clear(tries);
    tries.append(h('option', { value: '' }, 'latest'));
    for (let a = job.attempts; a >= 1; a--) tries.append(h('option', { value: a }, String(a)));
    tries.value = keep && Number(keep) <= job.attempts ? keep : '';
  }
}

// ----- services --------------------------------------------------------------------------

/** A latency in ms (one decimal under 10 ms; the unit unless ``unit`` is false), or a
 * dash when the window had no request. */
const fmtMs = (v, unit) =>
  fmtNum(v, v !== null && v !== undefined && v < 10 ? 1 : 0, unit === false ? '' : 'ms');

/** Whether a service's p95 is above its goal (false when either is unknown). */
function overGoal(sv) {
  const p95 = sv.stats.p95_ms;
  return sv.goal_p95_ms !== null && p95 !== null && p95 > sv.goal_p95_ms;
}

/** The device models of the ready replicas: "2x L4, 1x H100-SXM" (most first). */
function readyModels(replicas) {
  const counts = {};
  for (const r of replicas) {
    if (r.ready && !r.stopping) counts[r.model || '?'] = (counts[r.model || '?'] || 0) + 1;
  }
  const text = Object.entries(counts).sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([m, n]) => `${n}x ${m}`).join(', ');
  return text || dash;
}

const replicaState = (r) => (r.stopping ? 'stopping' : r.ready ? 'ready' : 'starting');

export function renderServices(services) {
  $('#services-card').hidden = !services.length;
  const tbody = clear($('#services-table tbody'));
  for (const sv of services) {
    const st = sv.stats;
    const errors = st.errors + st.rejected;
    tbody.append(h('tr', { 'data-service': `${sv.tenant}/${sv.name}`, 'data-state': sv.state },
      h('td', {}, h('a', { href: serviceHref(sv.tenant, sv.name), class: 'service-link' }, sv.name),
        h('div', { class: 'muted mono small url' }, sv.url)),
      h('td', {}, sv.tenant),
      h('td', { class: 'replicas' },
        `${sv.ready}/${sv.replicas.length} (${sv.min_replicas}..${sv.max_replicas})`,
        sv.updating ? h('span', { class: 'muted' }, ' updating') : null),
      h('td', { class: 'models' }, readyModels(sv.replicas)),
      h('td', { class: 'num rate' }, fmtNum(st.rate, 1)),
      h('td', { class: 'num p50' }, fmtMs(st.p50_ms, false)),
      h('td', {
        class: `num p95${overGoal(sv) ? ' over' : ''}`,
        title: sv.goal_p95_ms === null ? 'no p95 goal' : `goal ${sv.goal_p95_ms} ms`,
      }, fmtMs(st.p95_ms, false)),
      h('td', { class: 'num p99' }, fmtMs(st.p99_ms, false)),
      h('td', {
        class: `num errors${errors ? ' over' : ''}`,
        title: `${st.errors} failed, ${st.rejected} turned away (429) in ${st.window_s} s`,
      }, String(errors))));
  }
  const ready = services.reduce((n, sv) => n + sv.ready, 0);
  $('#services-summary').textContent =
    `${services.length} running · ${ready} replicas ready · latencies in ms`;
}

/** What one replica asks for, from the spec: "1 x L4 (0.5 each)". */
function asks(spec) {
  const acc = spec && spec.resources ? spec.resources.accelerators : null;
  if (!acc || typeof acc !== 'object') return String(acc || dash);
  const models = acc.models && acc.models.length ? acc.models.join(' | ') : 'any';
  return `${acc.count} x ${models}${acc.share && acc.share < 1 ? ` (${acc.share} each)` : ''}`;
}

export function renderService(sv, points, keep, canStop) {
  $('#service-title').textContent = sv.name;
  const st = $('#service-state');
  st.textContent = sv.state;
  st.className = `badge st-${sv.state}`;
  st.dataset.value = sv.state;
  const stats = sv.stats;
  const facts = [
    ['tenant', sv.tenant],
    ['url', sv.url],
    ['version', `${sv.version}${sv.updating ? ' · updating' : ''}`],
    ['goal p95', sv.goal_p95_ms === null ? 'none' : `${sv.goal_p95_ms} ms`],
    ['replicas', `${sv.ready}/${sv.replicas.length} ready (${sv.min_replicas}..${sv.max_replicas})`],
    ['each replica', asks(sv.spec)],
    ['requests', `${fmtNum(stats.rate, 1)}/s · ${stats.requests} in ${stats.window_s} s`],
    ['in flight', `${stats.inflight} · ${stats.queued} queued`],
    ['errors', `${stats.errors} failed · ${stats.rejected} turned away`],
  ];
  const dl = clear($('#service-facts'));
  for (const [k, v] of facts) dl.append(h('div', {}, h('dt', {}, k), h('dd', { 'data-fact': k }, v)));
  $('#service-stop').hidden = !(canStop && sv.state === 'running');

  const over = overGoal(sv);
  clear($('#service-latency')).append(
    h('span', { class: 'key p50' }, `p50 ${fmtMs(stats.p50_ms)}`), ' · ',
    h('span', { class: `key p95${over ? ' over' : ''}` }, `p95 ${fmtMs(stats.p95_ms)}`), ' · ',
    h('span', { class: 'key p99' }, `p99 ${fmtMs(stats.p99_ms)}`),
    points.length > 1
      ? ` · the last ${fmtAge((points[points.length - 1].t - points[0].t) / 1000)}` : null);
  renderSpark($('#service-chart'), points, keep, sv.goal_p95_ms);

  const tbody = clear($('#service-replicas tbody'));
  for (const r of sv.replicas) {
    const state = replicaState(r);
    tbody.append(h('tr', { 'data-replica': r.id, 'data-state': state },
      h('td', { class: 'mono' }, r.id),
      h('td', { class: 'mono job' }, h('a', { href: jobHref(r.job) }, r.job)),
      h('td', {}, r.model || dash),
      h('td', { class: 'num' }, String(r.port)),
      h('td', { class: 'state' }, badge(state, `st-${state}`))));
  }
  if (!sv.replicas.length) tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'no replica')));
  const byState = {};
  for (const r of sv.replicas) byState[replicaState(r)] = (byState[replicaState(r)] || 0) + 1;
  $('#service-replicas-summary').textContent = Object.entries(byState).sort()
    .map(([k, n]) => `${n} ${k}`).join(' · ');

  const events = clear($('#service-events tbody'));
  for (const e of sv.events.slice().reverse()) {
    events.append(h('tr', { 'data-what': e.what },
      h('td', { class: 'num' }, `${fmtAge(e.ago_s)} ago`),
      h('td', {}, badge(e.what, `ev-${e.what}`)),
      h('td', {}, e.detail)));
  }
  if (!sv.events.length) events.append(h('tr', {}, h('td', { colspan: 3, class: 'muted' }, 'none yet')));
}

/** The latency sparkline: p50 and p95 (ms) of the polls kept (``keep`` slots, the newest
 * at the right), a gap where a window had no request, the p95 goal dashed. */
function renderSpark(box, points, keep, goal) {
  clear(box);
  if (points.length < 2) {
    box.append(h('p', { class: 'muted small' }, 'collecting figures (one a second)…'));
    return;
  }
  const W = 1000, H = 140, TOP = 16, BOTTOM = 6;
  const values = points.flatMap((p) => [p.p50, p.p95]).filter((v) => v !== null);
  const peak = Math.max(1, ...values, goal || 0);
  const top = peak * 1.1;
  const x = (i) => ((keep - points.length + i) * W) / (keep - 1);
  const y = (v) => H - BOTTOM - ((H - TOP - BOTTOM) * v) / top;
  const line = (key) => {
    let d = '';
    let pen = false;
    points.forEach((p, i) => {
      if (p[key] === null) { pen = false; return; }
      d += `${pen ? 'L' : 'M'}${x(i).toFixed(1)} ${y(p[key]).toFixed(1)} `;
      pen = true;
    });
    return d.trim();
  };
  const apart = !goal || Math.abs(y(peak) - y(goal)) > 14;  // room for both labels
  const dots = ['p50', 'p95'].map((key) => {
    const last = points.length - 1;
    return points[last][key] === null ? null
      : s('circle', { class: `dot ${key}`, cx: x(last).toFixed(1), cy: y(points[last][key]).toFixed(1), r: 3 });
  });
  box.append(s('svg', {
    id: 'service-spark', class: 'spark', viewBox: `0 0 ${W} ${H}`, role: 'img',
    'aria-label': 'p50 and p95 latency, ms', 'data-points': points.length,
  },
  s('line', { class: 'grid', x1: 0, x2: W, y1: y(0), y2: y(0) }),
  s('line', { class: 'grid', x1: 0, x2: W, y1: y(peak), y2: y(peak) }),
  apart ? s('text', { class: 'axis', x: 4, y: y(peak) - 3 }, fmtMs(peak)) : null,
  goal ? s('line', { class: 'goal', x1: 0, x2: W, y1: y(goal), y2: y(goal) }) : null,
  goal ? s('text', { class: 'axis goal', x: 4, y: y(goal) - 3 }, `goal ${goal} ms`) : null,
  s('path', { class: 'p50', d: line('p50') }),
  s('path', { class: 'p95', d: line('p95') }),
  dots));
}

/** Read what the log has beyond what is shown (by byte offset), for the chosen rank
 * and stream; a new attempt starts the log over. */
