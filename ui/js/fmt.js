// Number and time formatting shared by every view. The breakdown panel's
// test compares displayed text with `ms()` of the API's nanoseconds.

/** Nanoseconds as milliseconds with 3 decimals: "12.345 ms". */
export function ms(ns) {
  if (ns === null || ns === undefined) return '–';
  return (ns / 1e6).toFixed(3) + ' ms';
}

/** A duration in the unit that reads best: "850 µs", "12.3 ms", "4.20 s". */
export function dur(ns) {
  if (ns === null || ns === undefined) return '–';
  const a = Math.abs(ns);
  if (a < 1e3) return ns.toFixed(0) + ' ns';
  if (a < 1e6) return (ns / 1e3).toFixed(1) + ' µs';
  if (a < 1e9) return (ns / 1e6).toFixed(a < 1e7 ? 2 : 1) + ' ms';
  return (ns / 1e9).toFixed(2) + ' s';
}

export function pct(p) {
  return p === null || p === undefined ? '–' : p.toFixed(1) + ' %';
}

export function num(x, digits = 1) {
  return x === null || x === undefined ? '–' : Number(x).toFixed(digits);
}

export function bytes(b) {
  if (b === null || b === undefined) return '–';
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (b >= 1024 && i < units.length - 1) { b /= 1024; i++; }
  return (i ? b.toFixed(1) : b.toFixed(0)) + ' ' + units[i];
}

/** "3 s ago", "5 min ago", "2 h ago", or a date. */
export function ago(tsNs) {
  const s = (Date.now() - tsNs / 1e6) / 1e3;
  if (s < 0) return 'just now';
  if (s < 90) return Math.round(s) + ' s ago';
  if (s < 5400) return Math.round(s / 60) + ' min ago';
  if (s < 172800) return Math.round(s / 3600) + ' h ago';
  return new Date(tsNs / 1e6).toISOString().slice(0, 16).replace('T', ' ');
}

export function time(tsNs) {
  return new Date(tsNs / 1e6).toISOString().replace('T', ' ').slice(0, 19) + 'Z';
}

/** Median of the finite numbers of `xs` (NaN when none). */
export function median(xs) {
  const v = xs.filter((x) => x !== null && x !== undefined && Number.isFinite(x)).sort((a, b) => a - b);
  if (!v.length) return NaN;
  const m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

/** Creates an element: el('td', {class: 'x', dataset: {rank: 5}}, 'text', child). */
export function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'dataset') Object.assign(e.dataset, v);
    else if (k === 'onclick' || k === 'oninput' || k === 'onchange' || k === 'onsubmit') e[k] = v;
    else if (k === 'style') e.style.cssText = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}
