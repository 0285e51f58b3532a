// The compact fabric view, for fabrics too large for the full map: every device a small
// cell, coloured as the map colours devices, grouped by pod, leaf switch and host (a host a
// column of cells, a leaf a block of its hosts, a pod a row of its leaves). Clicking a host
// opens its full map below (drill-down) and filters the device table to it.

import { clear, h, s } from './dom.js';
import { deviceLook } from './fabric.js';

export const COMPACT_AT = 128;  // more devices than this: the overview opens compact

const CELL = 9, CELL_GAP = 1, HOST_GAP = 3, LEAF_PAD = 6, LABEL = 13, BLOCK_GAP = 10;
const MAX_W = 1360;

/** The fabric's hosts by pod and leaf: [{pod, leaves: [{leaf, hosts: [host]}]}], in the
 * fabric's order. A host's leaf is the fabric switch its NICs link to (the first, if
 * several); hosts linked to none are grouped under "no switch". */
export function groupHosts(fabric) {
  const hostOf = new Map();
  for (const host of fabric.hosts) {
    for (const n of [...host.devices, ...host.switches]) hostOf.set(n.id, host.name);
  }
  const switches = new Map(fabric.switches.map((sw) => [sw.id, sw]));
  const leafOf = new Map();
  for (const l of fabric.links) {
    const [inner, outer] = hostOf.has(l.a) ? [l.a, l.b] : [l.b, l.a];
    const host = hostOf.get(inner);
    if (host && switches.has(outer) && !leafOf.has(host)) leafOf.set(host, outer);
  }
  const pods = new Map();
  for (const host of fabric.hosts) {
    const leaf = leafOf.get(host.name) || 'no switch';
    const pod = (switches.get(leaf) || {}).pod || '';
    if (!pods.has(pod)) pods.set(pod, new Map());
    const leaves = pods.get(pod);
    if (!leaves.has(leaf)) leaves.set(leaf, []);
    leaves.get(leaf).push(host);
  }
  return [...pods].map(([pod, leaves]) => ({
    pod, leaves: [...leaves].map(([leaf, hosts]) => ({ leaf, hosts })),
  }));
}

/** Draw the heatmap of ``fabric`` into ``container``; ``onHost(name)`` on a host's click.
 * Returns {cells: Map(device id -> rect), hosts: Map(name -> group)} for painting. */
export function drawHeatmap(container, fabric, onHost) {
  const groups = groupHosts(fabric);
  const cells = new Map();
  const hostGroups = new Map();
  const root = s('g', {});
  let x = 0, y = 0, rowH = 0, width = 0;
  for (const { pod, leaves } of groups) {
    if (x > 0) { x = 0; y += rowH + BLOCK_GAP; rowH = 0; }  // a pod starts a row
    for (const { leaf, hosts } of leaves) {
      const tall = Math.max(...hosts.map((hst) => hst.devices.length), 1);
      const w = 2 * LEAF_PAD + hosts.length * (CELL + HOST_GAP) - HOST_GAP;
      const bh = LABEL + 2 * LEAF_PAD + tall * (CELL + CELL_GAP) - CELL_GAP;
      if (x > 0 && x + w > MAX_W) { x = 0; y += rowH + BLOCK_GAP; rowH = 0; }
      const block = s('g', { class: 'hm-leaf', 'data-leaf': leaf, 'data-pod': pod },
        s('rect', { class: 'hm-frame', x, y, width: w, height: bh, rx: 4 }),
        s('text', { class: 'hm-label', x: x + LEAF_PAD, y: y + LABEL - 3 },
          pod ? `${leaf} · ${pod}` : leaf),
        s('title', {}, `${leaf}${pod ? ` (${pod})` : ''}: ${hosts.length} hosts`));
      hosts.forEach((host, i) => {
        const hx = x + LEAF_PAD + i * (CELL + HOST_GAP);
        const colH = host.devices.length * (CELL + CELL_GAP) - CELL_GAP;
        const g = s('g', { class: 'hm-host', 'data-host': host.name, tabindex: 0 },
          s('title', {}, `host ${host.name}: ${host.devices.length} devices (click for its map)`),
          s('rect', { class: 'hm-hit', x: hx - 1, y: y + LABEL + LEAF_PAD - 1, width: CELL + 2,
            height: colH + 2 }));  // the whole column takes the click, gaps too
        host.devices.forEach((d, k) => {
          const cell = s('rect', {
            class: 'hm-dev', 'data-device': d.id, width: CELL, height: CELL, rx: 1.5,
            x: hx, y: y + LABEL + LEAF_PAD + k * (CELL + CELL_GAP),
          }, s('title', {}, d.id));
          cells.set(d.id, cell);
          g.append(cell);
        });
        g.addEventListener('click', () => onHost(host.name));
        g.addEventListener('keydown', (ev) => { if (ev.key === 'Enter') onHost(host.name); });
        hostGroups.set(host.name, g);
        block.append(g);
      });
      root.append(block);
      x += w + BLOCK_GAP;
      width = Math.max(width, x);
      rowH = Math.max(rowH, bh);
    }
  }
  const height = y + rowH;
  const svg = s('svg', {
    class: 'heatmap', viewBox: `-2 -2 ${width + 4} ${height + 4}`, role: 'img',
    'aria-label': `fabric ${fabric.name}, compact`, 'data-fabric': fabric.name,
    'data-devices': cells.size, preserveAspectRatio: 'xMinYMin meet',
  }, root);
  svg.style.maxHeight = `${Math.max(120, height + 4)}px`;
  clear(container).append(svg);
  return { cells, hosts: hostGroups };
}

/** Colour the heatmap's cells by the devices' states and readings. */
export function paintHeatmap(hm, devices) {
  const byId = new Map(devices.map((d) => [d.id, d]));
  for (const [id, cell] of hm.cells) {
    const d = byId.get(id);
    const look = deviceLook(d);
    cell.setAttribute('fill', look.fill);
    cell.setAttribute('class', `hm-dev cond-${look.cond}`);
    cell.firstChild.textContent = d
      ? `${id} (${d.model}): ${d.state}${d.jobs.length ? `, ${d.jobs.join(', ')}` : ''}`
      : `${id}: no state`;
  }
}

/** The part of ``fabric`` a host's full map shows: the host, the fabric's switches it
 * links to, and those links. */
export function hostFabric(fabric, name) {
  const host = fabric.hosts.find((hst) => hst.name === name);
  if (!host) return null;
  const inside = new Set([...host.devices, ...host.switches].map((n) => n.id));
  const links = fabric.links.filter((l) => inside.has(l.a) || inside.has(l.b));
  const outer = new Set(links.flatMap((l) => [l.a, l.b]).filter((id) => !inside.has(id)));
  return {
    ...fabric, name: `${fabric.name}: ${name}`, hosts: [host],
    switches: fabric.switches.filter((sw) => outer.has(sw.id)), links,
  };
}

/** A one-line sparkline of ``values`` (oldest first) in ``box``; ``label`` says what. */
export function sparkline(box, values, label, format) {
  clear(box);
  const W = 120, H = 22;
  const last = values.length ? values[values.length - 1] : null;
  const top = Math.max(1, ...values);
  const pts = values.map((v, i) => `${((i * W) / Math.max(1, values.length - 1)).toFixed(1)},` +
    `${(H - 2 - ((H - 4) * v) / top).toFixed(1)}`).join(' ');
  box.append(
    h('span', { class: 'muted small' }, `${label} `),
    s('svg', { class: 'sparkline', viewBox: `0 0 ${W} ${H}`, width: W, height: H,
      'data-points': values.length, role: 'img', 'aria-label': label },
    values.length > 1 ? s('polyline', { points: pts }) : null,
    s('title', {}, `${label}: ${values.map(format).join(', ')} (since this page opened)`)),
    h('b', { class: 'small' }, last === null ? '—' : format(last)));
}
