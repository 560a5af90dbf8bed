// The rank x step heatmap: one cell per (step, rank), coloured by the
// cell's value relative to the median of its step across ranks
// (value / median; blue below, neutral at 1x, amber to red above). A rank
// slower than its peers in every step shows as a row. Hand-drawn into one
// ImageData (a 1,024 x 200 matrix is ~1 M pixels: tens of ms).
//
// createHeatmap(container, { onSelect(step, rank) }) returns
// { update(matrix, metric, flags, selected), select(step, rank), destroy() }
// where `matrix` is the API's /matrix document and `flags` a Map rank ->
// label of ranks to mark (active straggler verdicts). Flag markers are DOM
// elements (`.hm-flag[data-rank]`) so tests and screen readers can see them.
// The canvas has `cellCenter(step, rank)` -> client {x, y} and `data-draw-ms`.

import { dur, el, median } from './fmt.js';

/** The metrics the heatmap can colour by. */
export const METRICS = {
  compute_ns: { label: 'compute', help: 'GPU compute time of the rank in the step (the time the others wait for)' },
  step_time_ns: { label: 'step time', help: 'wall time between the step markers (equal on every rank of a synchronous job)' },
  comm_wait_ns: { label: 'collective wait', help: 'time the rank waited in collectives for other ranks (low on the rank they wait for)' },
  exposed_comm_ns: { label: 'exposed comm', help: 'communication not overlapped by compute' },
  idle_ns: { label: 'GPU idle', help: 'GPU idle time in the step' },
};

const SAT = Math.log2(1.5); // |log2 ratio| at which the colour saturates: 0.67x .. 1.5x
const MISSING = [22, 26, 33];
const STOPS = [ // t in [-1, 1] -> rgb
  [-1, [56, 110, 200]],
  [-0.4, [48, 78, 120]],
  [-0.1, [40, 46, 58]], // within ~4 % of the median: neutral (run-to-run jitter)
  [0.1, [40, 46, 58]],
  [0.35, [150, 120, 40]],
  [0.6, [225, 140, 40]],
  [1, [235, 60, 60]],
];

function lerpColour(t) {
  for (let i = 1; i < STOPS.length; i++) {
    const [t1, c1] = STOPS[i];
    const [t0, c0] = STOPS[i - 1];
    if (t <= t1) {
      const f = (t - t0) / (t1 - t0);
      return c0.map((c, k) => Math.round(c + f * (c1[k] - c)));
    }
  }
  return STOPS[STOPS.length - 1][1];
}

const LUT = (() => {
  const n = 256;
  const out = new Uint32Array(n);
  for (let i = 0; i < n; i++) {
    const [r, g, b] = lerpColour((i / (n - 1)) * 2 - 1);
    out[i] = (255 << 24) | (b << 16) | (g << 8) | r; // little-endian RGBA
  }
  return out;
})();
const MISSING_PX = (255 << 24) | (MISSING[2] << 16) | (MISSING[1] << 8) | MISSING[0];

/** Colour index of a ratio (value / step median). */
function lutIndex(ratio) {
  let t = ratio > 0 ? Math.log2(ratio) / SAT : -1;
  if (t < -1) t = -1;
  if (t > 1) t = 1;
  return Math.round(((t + 1) / 2) * 255);
}

function cellSize(steps, ranks, width) {
  const w = Math.max(1, Math.min(24, Math.floor(width / Math.max(1, steps))));
  const h = ranks <= 24 ? 20 : ranks <= 48 ? 12 : ranks <= 128 ? 6 : ranks <= 256 ? 3 : ranks <= 512 ? 2 : 1;
  return [w, h];
}

/** Per step (column) medians of `values` (rank-major, steps.length columns). */
export function stepMedians(values, nSteps, nRanks) {
  const out = new Float64Array(nSteps);
  const col = new Array(nRanks);
  for (let s = 0; s < nSteps; s++) {
    for (let r = 0; r < nRanks; r++) col[r] = values[r * nSteps + s];
    out[s] = median(col);
  }
  return out;
}

export function createHeatmap(container, { onSelect } = {}) {
  const canvas = el('canvas', { class: 'hm-canvas', role: 'img', 'aria-label': 'rank by step heatmap' });
  const overlay = el('canvas', { class: 'hm-overlay' });
  const gutter = el('div', { class: 'hm-gutter' });
  const xaxis = el('div', { class: 'hm-xaxis' });
  const tip = el('div', { class: 'hm-tip', hidden: true });
  const plot = el('div', { class: 'hm-plot' }, canvas, overlay, tip);
  const legend = el('div', { class: 'hm-legend' });
  const root = el('div', { class: 'heatmap' },
    el('div', { class: 'hm-body' }, gutter, el('div', { class: 'hm-right' }, plot, xaxis)), legend);
  container.replaceChildren(root);

  let m = null; // { steps, ranks, nodes, values, medians, cw, ch, metric }
  let selected = null;
  let hover = null;

  function cellAt(ev) {
    if (!m) return null;
    const r = canvas.getBoundingClientRect();
    const si = Math.floor((ev.clientX - r.left) / m.cw);
    const ri = Math.floor((ev.clientY - r.top) / m.ch);
    if (si < 0 || ri < 0 || si >= m.steps.length || ri >= m.ranks.length) return null;
    return { si, ri };
  }

  function drawOverlay() {
    const g = overlay.getContext('2d');
    g.clearRect(0, 0, overlay.width, overlay.height);
    if (!m) return;
    for (const ri of m.flagRows) {
      // Flagged rows: a red frame, or for thin rows red lines just above and
      // below, so that the row's own cells stay visible.
      g.fillStyle = 'rgba(255, 90, 90, 0.85)';
      const y = ri * m.ch;
      if (m.ch >= 4) {
        g.strokeStyle = g.fillStyle;
        g.lineWidth = 1;
        g.strokeRect(0.5, y + 0.5, overlay.width - 1, m.ch - 1);
      } else {
        g.fillRect(0, y - 2, overlay.width, 1);
        g.fillRect(0, y + m.ch + 1, overlay.width, 1);
      }
    }
    for (const [c, colour] of [[hover, 'rgba(255,255,255,0.5)'], [selected, '#ffffff']]) {
      if (!c) continue;
      const si = m.steps.indexOf(c.step);
      const ri = m.ranks.indexOf(c.rank);
      if (si < 0 || ri < 0) continue;
      g.strokeStyle = colour;
      g.lineWidth = 2;
      g.strokeRect(si * m.cw - 1, ri * m.ch - 1, m.cw + 2, m.ch + 2);
    }
  }

  function showTip(ev, c) {
    const { si, ri } = c;
    const v = m.values[ri * m.steps.length + si];
    const med = m.medians[si];
    tip.hidden = false;
    tip.replaceChildren(
      el('div', {}, el('b', {}, `step ${m.steps[si]} · rank ${m.ranks[ri]}`), ' ', el('span', { class: 'muted' }, m.nodes[ri])),
      el('div', {}, `${METRICS[m.metric]?.label || m.metric}: ${v === null ? 'no data' : dur(v)}`),
      el('div', {}, `step median: ${dur(med)}` + (v !== null && med > 0 ? ` · ${(v / med).toFixed(2)}x` : '')),
      el('div', { class: 'muted small' }, 'click for the breakdown'));
    const pr = plot.getBoundingClientRect();
    const x = ev.clientX - pr.left + 14;
    tip.style.left = Math.min(x, pr.width - 220) + 'px';
    tip.style.top = ev.clientY - pr.top + 14 + 'px';
  }

  overlay.addEventListener('mousemove', (ev) => {
    const c = cellAt(ev);
    hover = c ? { step: m.steps[c.si], rank: m.ranks[c.ri] } : null;
    if (c) showTip(ev, c);
    else tip.hidden = true;
    drawOverlay();
  });
  overlay.addEventListener('mouseleave', () => { hover = null; tip.hidden = true; drawOverlay(); });
  overlay.addEventListener('click', (ev) => {
    const c = cellAt(ev);
    if (!c) return;
    selected = { step: m.steps[c.si], rank: m.ranks[c.ri] };
    drawOverlay();
    if (onSelect) onSelect(selected.step, selected.rank);
  });

  canvas.cellCenter = (step, rank) => {
    const si = m ? m.steps.indexOf(step) : -1;
    const ri = m ? m.ranks.indexOf(rank) : -1;
    if (si < 0 || ri < 0) return null;
    const r = canvas.getBoundingClientRect();
    return { x: r.left + (si + 0.5) * m.cw, y: r.top + (ri + 0.5) * m.ch };
  };

  function update(matrix, metric, flags = new Map(), sel = null) {
    const t0 = performance.now();
    const { steps, ranks, nodes } = matrix;
    const values = matrix.values[metric] || [];
    const width = Math.max(200, root.clientWidth - gutter.offsetWidth - 8);
    const [cw, ch] = cellSize(steps.length, ranks.length, width);
    const medians = stepMedians(values, steps.length, ranks.length);
    const W = Math.max(1, steps.length * cw);
    const H = Math.max(1, ranks.length * ch);
    for (const c of [canvas, overlay]) {
      c.width = W;
      c.height = H;
      c.style.width = W + 'px';
      c.style.height = H + 'px';
    }
    const img = new ImageData(W, H);
    const px = new Uint32Array(img.data.buffer);
    const gapX = cw >= 9 ? 1 : 0;
    const gapY = ch >= 6 ? 1 : 0;
    const bg = (255 << 24) | (20 << 16) | (16 << 8) | 14;
    px.fill(bg);
    const nS = steps.length;
    for (let ri = 0; ri < ranks.length; ri++) {
      for (let si = 0; si < nS; si++) {
        const v = values[ri * nS + si];
        const med = medians[si];
        const colour = v === null || v === undefined || !(med > 0) ? (v === null || v === undefined ? MISSING_PX : LUT[128]) : LUT[lutIndex(v / med)];
        const x0 = si * cw;
        for (let y = ri * ch, y1 = y + ch - gapY; y < y1; y++) {
          const row = y * W;
          for (let x = x0, x1 = x0 + cw - gapX; x < x1; x++) px[row + x] = colour;
        }
      }
    }
    canvas.getContext('2d').putImageData(img, 0, 0);
    m = { steps, ranks, nodes, values, medians, cw, ch, metric, flagRows: [] };
    for (const rank of flags.keys()) {
      const ri = ranks.indexOf(rank);
      if (ri >= 0) m.flagRows.push(ri);
    }

    // Rank labels: every k-th row so that labels are >= 13 px apart, flagged rows always.
    gutter.style.height = H + 'px';
    const every = Math.max(1, Math.ceil(13 / ch));
    const labels = [];
    for (let ri = 0; ri < ranks.length; ri += every) {
      if (flags.has(ranks[ri])) continue;
      labels.push(el('div', { class: 'hm-rank', style: `top:${ri * ch + ch / 2}px` }, 'r' + ranks[ri]));
    }
    for (const [rank, label] of flags) {
      const ri = ranks.indexOf(rank);
      if (ri < 0) continue;
      labels.push(el('div', {
        class: 'hm-flag', dataset: { rank }, title: label, style: `top:${ri * ch + ch / 2}px`,
      }, '⚑ r' + rank));
    }
    gutter.replaceChildren(...labels);

    // Step axis: a tick every k steps, >= 48 px apart.
    const k = Math.max(1, Math.ceil(48 / cw));
    const nice = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1000].find((n) => n >= k) || k;
    const ticks = [];
    for (let si = 0; si < nS; si++) {
      if (steps[si] % nice === 0) ticks.push(el('span', { style: `left:${si * cw + cw / 2}px` }, steps[si]));
    }
    xaxis.style.width = W + 'px';
    xaxis.replaceChildren(...ticks);

    legend.replaceChildren(
      el('span', { class: 'muted' }, `${METRICS[metric]?.label || metric} / step median`),
      el('span', { class: 'hm-scale' }, el('span', {}, '≤0.67x'), el('i', {}), el('span', {}, '1x'), el('i', { class: 'hot' }), el('span', {}, '≥1.5x')),
      el('span', { class: 'muted small' }, `${ranks.length} ranks × ${nS} steps`));

    selected = sel;
    drawOverlay();
    const ms = performance.now() - t0;
    canvas.dataset.drawMs = ms.toFixed(1);
    canvas.dataset.steps = nS;
    canvas.dataset.lastStep = nS ? steps[nS - 1] : '';
    return ms;
  }

  return {
    update,
    select(step, rank) { selected = { step, rank }; drawOverlay(); },
    canvas,
    destroy() { root.remove(); },
  };
}
