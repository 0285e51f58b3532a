// The tables and the job page: render functions over the API's answers (no fetching).

import {
  $, clear, dash, fmtAge, fmtBytes, fmtNum, fmtTime, h, jobHref, now,
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

export function renderDevices(devices, admin, onOp) {
  const tbody = clear($('#device-table tbody'));
  const counts = {};
  for (const d of devices) {
    counts[d.state] = (counts[d.state] || 0) + 1;
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
  for (const i of tbody.querySelectorAll('i[data-pct]')) i.style.width = `${i.dataset.pct}%`;
  $('#devices-summary').textContent = Object.entries(counts).sort()
    .map(([k, n]) => `${n} ${k}`).join(' · ');
}

export function renderQueue(active, finished) {
  const tbody = clear($('#queue-table tbody'));
  const t = now();
  // waiting jobs first (oldest first), then the running ones
  const jobs = [...active].sort((a, b) => {
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
  if (!jobs.length) tbody.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'no queued or running jobs')));
  const waiting = jobs.filter((j) => QUEUED.includes(j.state)).length;
  $('#queue-summary').textContent = `${waiting} waiting · ${jobs.length - waiting} running`;

  const recent = clear($('#recent-table tbody'));
  for (const j of finished) {
    recent.append(h('tr', { 'data-job': j.id, 'data-state': j.state },
      h('td', {}, h('a', { href: jobHref(j.id) }, j.name)),
      h('td', {}, j.tenant),
      h('td', {}, badge(j.state, `st-${j.state}`)),
      h('td', { class: 'muted' }, j.error || (j.finished_at ? `${fmtAge(t - j.finished_at)} ago` : ''))));
  }
  if (!finished.length) recent.append(h('tr', {}, h('td', { class: 'muted' }, 'none yet')));
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
}

/** Read what the log has beyond what is shown (by byte offset), for the chosen rank
 * and stream; a new attempt starts the log over. */
