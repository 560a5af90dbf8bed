// Per-rank stacked bars over the job (the /ranks route: HTA's temporal
// breakdown per rank): compute, exposed communication (comm - overlap),
// memory and other non-compute (non_compute - exposed comm), idle; the
// four add up to the rank's GPU span. Overlap % (100 * overlap / comm,
// HTA's comm/comp overlap) is drawn as a dot per rank on its own 0-100 %
// scale. Hand-drawn on a canvas: one bar per rank, 1 px wide at 1,024 ranks.

import { dur, el, pct } from './fmt.js';

export const SEGMENTS = [
  { key: 'compute', label: 'compute', colour: '#4c9be8' },
  { key: 'exposed', label: 'exposed comm', colour: '#e8834c' },
  { key: 'memory', label: 'memory / other', colour: '#a77be0' },
  { key: 'idle', label: 'idle', colour: '#3a4352' },
];

/** The four segments of a /ranks row, in ns. */
export function segments(r) {
  const exposed = Math.max(0, r.comm_ns - r.overlap_ns);
  return {
    compute: r.compute_ns,
    exposed,
    memory: Math.max(0, r.non_compute_ns - exposed),
    idle: r.idle_ns,
  };
}

export function drawRankBars(container, rows, { flags = new Map(), onSelect } = {}) {
  const H = 200;
  const width = Math.max(300, container.clientWidth - 8);
  const n = rows.length;
  const bw = Math.max(1, Math.min(32, Math.floor(width / Math.max(1, n))));
  const W = bw * n;
  const canvas = el('canvas', { class: 'bars-canvas', width: W, height: H, style: `width:${W}px;height:${H}px` });
  const tip = el('div', { class: 'hm-tip', hidden: true });
  const g = canvas.getContext('2d');
  g.fillStyle = '#12161d';
  g.fillRect(0, 0, W, H);
  const gap = bw >= 5 ? 1 : 0;
  rows.forEach((r, i) => {
    const seg = segments(r);
    const total = SEGMENTS.reduce((a, s) => a + seg[s.key], 0) || 1;
    let y = H;
    for (const s of SEGMENTS) {
      const h = (seg[s.key] / total) * H;
      g.fillStyle = s.colour;
      g.fillRect(i * bw, y - h, bw - gap, h);
      y -= h;
    }
    if (r.overlap_pct !== null && r.overlap_pct !== undefined) {
      g.fillStyle = '#ffffff';
      const oy = H - (r.overlap_pct / 100) * H;
      g.fillRect(i * bw + Math.max(0, bw / 2 - 2), oy - 1.5, Math.min(4, bw), 3);
    }
    if (flags.has(r.rank)) {
      g.fillStyle = '#ff5a5a';
      g.fillRect(i * bw, 0, bw - gap, 4);
    }
  });
  canvas.addEventListener('mousemove', (ev) => {
    const rect = canvas.getBoundingClientRect();
    const i = Math.floor((ev.clientX - rect.left) / bw);
    const r = rows[i];
    if (!r) { tip.hidden = true; return; }
    const seg = segments(r);
    tip.hidden = false;
    tip.replaceChildren(
      el('div', {}, el('b', {}, 'rank ' + r.rank), ' ', el('span', { class: 'muted' }, r.node)),
      ...SEGMENTS.map((s) => el('div', {}, el('i', { class: 'swatch', style: `background:${s.colour}` }), ` ${s.label}: ${dur(seg[s.key])} (${pct((100 * seg[s.key]) / (r.gpu_span_ns || 1))})`)),
      el('div', {}, `overlap: ${pct(r.overlap_pct)} · memory kernels: ${dur(r.memory_ns)}`));
    tip.style.left = Math.min(ev.clientX - rect.left + 12, W - 240) + 'px';
    tip.style.top = ev.clientY - rect.top + 12 + 'px';
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  canvas.addEventListener('click', (ev) => {
    const i = Math.floor((ev.clientX - canvas.getBoundingClientRect().left) / bw);
    if (rows[i] && onSelect) onSelect(rows[i].rank);
  });
  const legend = el('div', { class: 'legend' },
    ...SEGMENTS.map((s) => el('span', {}, el('i', { class: 'swatch', style: `background:${s.colour}` }), ' ' + s.label)),
    el('span', {}, el('i', { class: 'swatch', style: 'background:#fff' }), ' overlap % (0-100)'));
  container.replaceChildren(el('div', { class: 'bars-plot' }, canvas, tip), legend);
}
