// Small helpers of the dashboard: building elements (always as text, never as HTML),
// formatting numbers, times and ages, a toast.

const SVG_NS = 'http://www.w3.org/2000/svg';

export const $ = (sel) => document.querySelector(sel);

/** An HTML element: h('td', {class: 'num'}, 'text', child, ...). */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  appendAll(el, children);
  return el;
}

/** An SVG element, as h(). */
export function s(tag, attrs, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  setAttrs(el, attrs);
  appendAll(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'text') el.textContent = String(v);
    else el.setAttribute(k, v === true ? '' : String(v));
  }
}

function appendAll(el, children) {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(el) {
  while (el.firstChild) el.removeChild(el.firstChild);
  return el;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
export const dash = '—';

export function fmtNum(v, digits, unit) {
  if (v === null || v === undefined || Number.isNaN(v)) return dash;
  return `${Number(v).toFixed(digits)}${unit ? ' ' + unit : ''}`;
}

export function fmtBytes(v) {
  if (v === null || v === undefined) return null;
  const gib = v / 2 ** 30;
  return gib >= 10 ? gib.toFixed(0) : gib.toFixed(1);
}

export function fmtAge(seconds) {
  if (seconds === null || seconds === undefined) return dash;
  const t = Math.max(0, seconds);
  if (t < 60) return `${t.toFixed(t < 10 ? 1 : 0)} s`;
  if (t < 3600) return `${Math.floor(t / 60)} min`;
  if (t < 86400) return `${(t / 3600).toFixed(1)} h`;
  return `${(t / 86400).toFixed(1)} d`;
}

export const now = () => Date.now() / 1000;
export const fmtTime = (at) => (at ? new Date(at * 1000).toLocaleString() : dash);
export const jobHref = (id) => `#/jobs/${encodeURIComponent(id)}`;
export const serviceHref = (tenant, name) =>
  `#/services/${encodeURIComponent(tenant)}/${encodeURIComponent(name)}`;

export function toast(message, kind) {
  const el = $('#toast');
  el.textContent = message;
  el.dataset.kind = kind || 'info';
  el.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { el.hidden = true; }, 6000);
}
