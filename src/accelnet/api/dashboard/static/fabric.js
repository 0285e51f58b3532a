// The fabric map: an SVG of hosts (boxes holding NICs, sockets, PCIe switches, devices,
// NVSwitches), the fabric's switches above them, and the links; devices coloured by their
// condition and utilization, links by utilization (from /metrics) or by medium.

import { clear, fmtNum, h, s } from './dom.js';

const DEV_W = 66, DEV_H = 40, SW_W = 58, SW_H = 16, EXT_W = 96, EXT_H = 24;
const GAP = 10, PAD = 12, HEAD = 22, ROW_GAP = 24, HOST_GAP = 22, MAX_W = 1360;
const TOP = 34;  // room over the fabric's switches for the arcs between them

const MEDIUM_COLOURS = {
  nvlink: '#5a9e1b', xgmi: '#5a9e1b', ici: '#5a9e1b',
  pcie: '#4a78c2', smp: '#8a8f98', upi: '#8a8f98',
  infiniband: '#b04a8f', ethernet: '#d9822b', roce: '#d9822b',
  wifi: '#7b61c9', wireless: '#7b61c9',
};

export const linkKey = (a, b) => (a < b ? `${a}|${b}` : `${b}|${a}`);

/** Which row of its host a node goes in (top to bottom). */
function hostRow(kind) {
  if (kind === 'device') return 3;
  if (kind === 'nic') return 0;
  if (kind === 'cpu_root' || kind === 'socket' || kind === 'cpu') return 1;
  if (/nvswitch|nvlink|xgmi|ici/.test(kind)) return 4;
  return 2;
}

/** Place nodes of one row left to right near their wished x (their neighbours' mean),
 * keeping ``gap`` between them and the row inside [lo, hi]. */
function placeRow(items, width, gap, lo, hi) {
  items.sort((p, q) => p.want - q.want || p.order - q.order);
  let x = lo - gap;
  for (const it of items) { it.x = Math.max(it.want - width / 2, x + gap); x = it.x + width; }
  let right = hi;
  for (let i = items.length - 1; i >= 0; i--) {
    items[i].x = Math.min(items[i].x, right - width);
    right = items[i].x - gap;
  }
  for (const it of items) it.x = Math.max(it.x, lo);
}

/** Lay the fabric out: hosts as boxes (wrapping into rows), inside each its NICs,
 * sockets, PCIe switches, devices and NVSwitches in rows; the fabric's own switches
 * above the hosts. Returns node boxes by id and the overall size. */
function layout(fabric) {
  const boxes = new Map();   // id -> {x, y, w, h, kind, host}
  const adj = new Map();
  const link = (a, b) => {
    if (!adj.has(a)) adj.set(a, []);
    if (!adj.has(b)) adj.set(b, []);
    adj.get(a).push(b);
    adj.get(b).push(a);
  };
  for (const host of fabric.hosts) for (const l of host.links) link(l.a, l.b);
  for (const l of fabric.links) link(l.a, l.b);
  const mean = (id) => {
    const xs = (adj.get(id) || []).map((n) => boxes.get(n)).filter(Boolean)
      .map((b) => b.x + b.w / 2);
    return xs.length ? xs.reduce((p, q) => p + q, 0) / xs.length : null;
  };

  // each host on its own, at the origin
  const hosts = fabric.hosts.map((host) => {
    const rows = [[], [], [], [], []];
    host.devices.forEach((d, i) => rows[3].push({ id: d.id, kind: 'device', order: i }));
    host.switches.forEach((sw, i) => rows[hostRow(sw.kind)].push({ id: sw.id, kind: sw.kind, order: i }));
    const widthOf = (r, i) => r.length * ((i === 3 ? DEV_W : SW_W) + GAP) - GAP;
    const w = Math.max(150, ...rows.map(widthOf)) + 2 * PAD;
    const used = rows.map((r, i) => ({ r, i })).filter(({ r }) => r.length);
    let y = HEAD;
    const rowY = {};
    for (const { r, i } of used) {
      rowY[i] = y;
      y += (i === 3 ? DEV_H : SW_H) + ROW_GAP;
    }
    const local = new Map();
    const put = (items, i) => {
      for (const it of items) {
        local.set(it.id, {
          x: it.x, y: rowY[i], w: i === 3 ? DEV_W : SW_W, h: i === 3 ? DEV_H : SW_H,
          kind: it.kind, host: host.name,
        });
      }
    };
    // devices evenly, then the rest by their neighbours, nearest rows first
    const devW = widthOf(rows[3], 3);
    rows[3].forEach((it, k) => { it.x = (w - devW) / 2 + k * (DEV_W + GAP); });
    put(rows[3], 3);
    for (const i of [2, 4, 1, 0]) {
      for (const it of rows[i]) {
        const xs = (adj.get(it.id) || []).map((n) => local.get(n)).filter(Boolean)
          .map((b) => b.x + b.w / 2);
        it.want = xs.length ? xs.reduce((p, q) => p + q, 0) / xs.length : w / 2;
      }
      placeRow(rows[i], SW_W, GAP, PAD, w - PAD);
      put(rows[i], i);
    }
    return { host, w, h: y - ROW_GAP + PAD, local };
  });

  // the fabric's switches: spines on top, then the rest
  const tiers = [[], []];
  fabric.switches.forEach((sw, i) => {
    tiers[/spine|core|super/.test(sw.kind) ? 0 : 1].push({ id: sw.id, kind: sw.kind, order: i });
  });
  const tierCount = tiers.filter((t) => t.length).length;
  const top = tierCount ? tierCount * (EXT_H + 40) + TOP : 0;

  // hosts in rows, wrapping at MAX_W
  let x = 0, y = top, rowH = 0, width = 0;
  for (const hb of hosts) {
    if (x > 0 && x + hb.w > MAX_W) { x = 0; y += rowH + HOST_GAP; rowH = 0; }
    hb.x = x;
    hb.y = y;
    for (const [id, b] of hb.local) boxes.set(id, { ...b, x: b.x + x, y: b.y + y });
    x += hb.w + HOST_GAP;
    rowH = Math.max(rowH, hb.h);
    width = Math.max(width, x - HOST_GAP);
  }
  const height = y + rowH;

  const tierY = [];
  let yy = TOP;
  for (let i = 0; i < 2; i++) if (tiers[i].length) { tierY[i] = yy; yy += EXT_H + 40; }
  for (const i of [1, 0]) {  // leaves first (by the hosts under them), then spines
    if (!tiers[i].length) continue;
    for (const it of tiers[i]) {
      const m = mean(it.id);
      it.want = m === null ? width / 2 : m;
    }
    placeRow(tiers[i], EXT_W, 2 * GAP, 0, Math.max(width, tiers[i].length * (EXT_W + 2 * GAP)));
    for (const it of tiers[i]) {
      boxes.set(it.id, { x: it.x, y: tierY[i], w: EXT_W, h: EXT_H, kind: it.kind, host: null });
    }
  }
  for (const b of boxes.values()) width = Math.max(width, b.x + b.w);
  return { boxes, hosts, width, height };
}

function linkTitle(l) {
  const bits = [l.medium, l.generation, l.count > 1 ? `x${l.count}` : null]
    .filter(Boolean).join(' ');
  return `${l.a} ↔ ${l.b}: ${bits}, ${l.bandwidth_gbps} GB/s, ${l.latency_us} µs`;
}

export function drawFabric(container, fabric, onDevice) {
  const { boxes, hosts, width, height } = layout(fabric);
  const svg = s('svg', {
    viewBox: `-4 -4 ${width + 8} ${height + 8}`,
    role: 'img',
    'aria-label': `fabric ${fabric.name}`,
    'data-fabric': fabric.name,
    preserveAspectRatio: 'xMidYMin meet',
  });
  svg.style.maxHeight = `${Math.max(240, height + 8)}px`;
  const gExt = s('g', { class: 'ext-links' });
  const gLinks = s('g', { class: 'links' });
  const gHosts = s('g', { class: 'hosts' });
  const gNodes = s('g', { class: 'nodes' });
  svg.append(gExt, gHosts, gLinks, gNodes);
  const links = [];
  const centre = (b, end) => ({
    x: b.x + b.w / 2,
    y: end === 'top' ? b.y : end === 'bottom' ? b.y + b.h : b.y + b.h / 2,
  });

  for (const hb of hosts) {
    gHosts.append(s('g', { class: 'host', 'data-host': hb.host.name },
      s('rect', { x: hb.x, y: hb.y, width: hb.w, height: hb.h, rx: 8 }),
      s('text', { x: hb.x + PAD, y: hb.y + 15, class: 'host-label' }, hb.host.name),
      s('title', {}, `host ${hb.host.name}: ${hb.host.devices.length} devices`)));
  }
  const width_ = (bw) => Math.min(6, 1 + Math.log2(1 + (bw || 0) / 12)).toFixed(2);
  const dashes = (medium) => (/wifi|wireless/.test(medium) ? '5 4' : null);
  // links between a host and a switch of the fabric: one line per host, switch and
  // medium (from the top of the host box, over its NICs), under the host boxes
  const groups = new Map();
  const single = fabric.hosts.flatMap((host) => host.links);
  for (const l of fabric.links) {
    const a = boxes.get(l.a), b = boxes.get(l.b);
    if (!a || !b) continue;
    if (Boolean(a.host) === Boolean(b.host)) { single.push(l); continue; }
    const [inner, outerId] = a.host ? [a, l.b] : [b, l.a];
    const medium = String(l.medium || '').toLowerCase();
    const key = `${inner.host}|${outerId}|${medium}`;
    if (!groups.has(key)) groups.set(key, { host: inner.host, sw: outerId, medium, links: [], xs: [] });
    const g = groups.get(key);
    g.links.push(l);
    g.xs.push(inner.x + inner.w / 2);
  }
  const hostBox = new Map(hosts.map((hb) => [hb.host.name, hb]));
  for (const g of groups.values()) {
    const hb = hostBox.get(g.host), sw = boxes.get(g.sw);
    const p = { x: g.xs.reduce((u, v) => u + v, 0) / g.xs.length, y: hb.y };
    const q = centre(sw, p.y > sw.y ? 'bottom' : 'top');
    const my = (p.y + q.y) / 2;
    const l0 = g.links[0];
    const ends = g.links.map((l) => (l.a === g.sw ? l.b : l.a).slice(g.host.length + 1));
    const title = `${g.host} ↔ ${g.sw}: ${g.links.length} link${g.links.length > 1 ? 's' : ''} ` +
      `(${ends.join(', ')}), ${[l0.medium, l0.generation].filter(Boolean).join(' ')}, ` +
      `${l0.bandwidth_gbps} GB/s${g.links.length > 1 ? ' each' : ''}, ${l0.latency_us} µs`;
    const el = s('path', {
      d: `M${p.x},${p.y} C${p.x},${my} ${q.x},${my} ${q.x},${q.y}`,
      class: `link ext medium-${g.medium}`,
      'data-host': g.host,
      'data-switch': g.sw,
      'data-links': g.links.length,
      'stroke-width': width_(g.links.reduce((t, l) => t + (l.bandwidth_gbps || 0), 0)),
      'stroke-dasharray': dashes(g.medium),
    }, s('title', {}, title));
    gExt.append(el);
    links.push({ el, keys: g.links.map((l) => linkKey(l.a, l.b)), medium: g.medium });
  }
  // the rest: inside hosts, between the fabric's switches, host to host
  for (const l of single) {
    const a = boxes.get(l.a), b = boxes.get(l.b);
    if (!a || !b) continue;
    const [up, down] = a.y <= b.y ? [a, b] : [b, a];
    const sameRow = Math.abs(a.y - b.y) < 1;
    const p = sameRow ? centre(up, 'mid') : centre(up, 'bottom');
    const q = sameRow ? centre(down, 'mid') : centre(down, 'top');
    let d;
    if (sameRow) {
      const lift = Math.min(30, Math.abs(p.x - q.x) / 4 + 8);
      d = `M${p.x},${up.y} C${p.x},${up.y - lift} ${q.x},${up.y - lift} ${q.x},${down.y}`;
    } else {
      const my = (p.y + q.y) / 2;
      d = `M${p.x},${p.y} C${p.x},${my} ${q.x},${my} ${q.x},${q.y}`;
    }
    const medium = String(l.medium || '').toLowerCase();
    const el = s('path', {
      d,
      class: `link medium-${medium}`,
      'data-a': l.a,
      'data-b': l.b,
      'stroke-width': width_(l.bandwidth_gbps),
      'stroke-dasharray': dashes(medium),
    }, s('title', {}, linkTitle(l)));
    gLinks.append(el);
    links.push({ el, keys: [linkKey(l.a, l.b)], medium });
  }

  const nodes = new Map();
  const deviceIds = new Set(fabric.hosts.flatMap((host) => host.devices.map((d) => d.id)));
  for (const [id, b] of boxes) {
    const short = b.host && id.startsWith(`${b.host}/`) ? id.slice(b.host.length + 1) : id;
    if (deviceIds.has(id)) {
      const sub = s('text', { x: b.x + b.w / 2, y: b.y + 30, class: 'dev-sub' }, '');
      const title = s('title', {}, id);
      const g = s('g', { class: 'device', 'data-device': id, tabindex: 0 },
        s('rect', { x: b.x, y: b.y, width: b.w, height: b.h, rx: 6 }),
        s('text', { x: b.x + b.w / 2, y: b.y + 15, class: 'dev-name' }, short),
        sub, title);
      g.addEventListener('click', () => onDevice(id));
      gNodes.append(g);
      nodes.set(id, { g, sub, title });
    } else {
      const ext = !b.host;
      gNodes.append(s('g', { class: `switch ${ext ? 'ext' : ''} kind-${b.kind}`, 'data-switch': id },
        s('rect', { x: b.x, y: b.y, width: b.w, height: b.h, rx: ext ? 5 : 3 }),
        s('text', { x: b.x + b.w / 2, y: b.y + b.h / 2 + 4 }, short),
        s('title', {}, `${id} (${b.kind})`)));
    }
  }
  clear(container).append(svg);
  return { nodes, links };
}

/** A device's condition, for colours: failed, drained, repair, busy, idle, unknown. */
function condition(d) {
  if (!d) return 'unknown';
  if (d.health === 'fail' || d.state === 'unhealthy' || d.state === 'offline') return 'failed';
  if (d.state === 'draining' || d.state === 'drained') return 'drained';
  if (d.state === 'refreshing' || (d.phase && d.phase !== 'healthy')) return 'repair';
  if (d.busy || d.state === 'allocated') return 'busy';
  if (d.state === 'ready') return 'idle';
  return 'unknown';
}

/** 0..1 -> a colour from pale to deep blue. */
function heat(u) {
  const t = Math.max(0, Math.min(1, u));
  const from = [227, 240, 252], to = [13, 71, 161];
  const c = from.map((f, i) => Math.round(f + (to[i] - f) * t));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

/** The colour level of a busy device at utilization ``u`` (0..1). */
const busyLevel = (u) => 0.3 + 0.7 * Math.max(0, Math.min(1, u));

const CONDITION_FILL = {
  failed: '#e5534b', drained: '#f0a64a', repair: '#b58ad6', unknown: '#c9ccd1',
  idle: '#e9f5ea', busy: '#a9bcd0',
};

/** Colour the drawn ``map`` by the devices' states and readings, and the links by
 * ``linkUse`` (Map "a|b" -> 0..1; null: by medium); redraw the ``legend``. */
/** How a device looks: its condition, its fill colour (busy: blue, deeper with
 * utilization, never as pale as idle; the rest by condition), whether the fill is dark,
 * and its utilization (0..1, null when not read). */
export function deviceLook(d) {
  const cond = condition(d);
  const util = d && d.utilization_pct !== null && d.utilization_pct !== undefined
    ? d.utilization_pct / 100 : null;
  const level = cond === 'busy' && util !== null ? busyLevel(util) : null;
  return {
    cond, util, dark: level !== null && level > 0.6,
    fill: level !== null ? heat(level) : CONDITION_FILL[cond],
  };
}

export function paintFabric(map, devices, linkUse, legend) {
  const byId = new Map(devices.map((d) => [d.id, d]));
  for (const [id, node] of map.nodes) {
    const d = byId.get(id);
    const { cond, util, dark, fill } = deviceLook(d);
    const rect = node.g.querySelector('rect');
    rect.setAttribute('fill', fill);
    node.g.setAttribute('class', `device cond-${cond}${dark ? ' dark' : ''}`);
    node.g.dataset.state = d ? d.state : 'unknown';
    node.g.dataset.health = d ? d.health : 'unknown';
    node.sub.textContent = d
      ? (util !== null && (d.busy || util > 0) ? `${Math.round(util * 100)}%` : d.busy ? 'busy' : d.state)
      : '?';
    node.title.textContent = d ? [
      `${d.id} (${d.model})`,
      `state ${d.state}, ${d.phase}; health ${d.health}`,
      `utilization ${fmtNum(d.utilization_pct, 0, '%')}, power ${fmtNum(d.power_w, 0, 'W')}, ` +
        `temperature ${fmtNum(d.temperature_c, 0, '°C')}`,
      d.jobs.length ? `jobs: ${d.jobs.join(', ')}` : d.busy ? 'busy' : 'no jobs',
    ].join('\n') : `${id}: no state`;
  }
  for (const l of map.links) {
    const u = linkUse ? Math.max(0, ...l.keys.map((k) => linkUse.get(k) || 0)) : undefined;
    if (linkUse) {
      l.el.setAttribute('stroke', u ? heat(0.25 + 0.75 * u) : '#c4c8ce');
      l.el.dataset.utilization = String(u || 0);
    } else {
      l.el.setAttribute('stroke', MEDIUM_COLOURS[l.medium] || '#8a8f98');
    }
  }
  if (legend) renderLegend(legend, map, linkUse);
}

export function renderLegend(el, map, linkUse) {
  const legend = clear(el);
  const swatch = (colour, label, cls) => h('span', { class: `swatch ${cls || ''}` },
    h('i', { 'data-colour': colour }), label);
  const items = [
    swatch(CONDITION_FILL.idle, 'idle'),
    swatch(heat(busyLevel(0)), 'busy: utilization 0%'),
    swatch(heat(busyLevel(0.5)), '50%'),
    swatch(heat(busyLevel(1)), '100%'),
    swatch(CONDITION_FILL.busy, 'busy (no reading)'),
    swatch(CONDITION_FILL.drained, 'draining / drained'),
    swatch(CONDITION_FILL.repair, 'in repair'),
    swatch(CONDITION_FILL.failed, 'failed'),
  ];
  legend.append(h('span', { class: 'legend-group' }, h('b', {}, 'devices'), items));
  const links = [];
  if (linkUse) {
    links.push(swatch('#c4c8ce', 'idle', 'line'), swatch(heat(0.5), 'used', 'line'),
      swatch(heat(1), 'saturated', 'line'));
  } else {
    const seen = new Set(map.links.map((l) => l.medium));
    for (const m of [...seen].sort()) links.push(swatch(MEDIUM_COLOURS[m] || '#8a8f98', m, 'line'));
  }
  if (links.length) {
    legend.append(h('span', { class: 'legend-group' },
      h('b', {}, linkUse ? 'links (utilization)' : 'links (medium; width: bandwidth)'), links));
  }
  for (const i of legend.querySelectorAll('i[data-colour]')) i.style.background = i.dataset.colour;
}
