// Line charts over steps with the vendored uPlot (MIT, ui/vendor/uplot,
// loaded as the global `uPlot`).

import { el } from './fmt.js';

export const PALETTE = ['#4c9be8', '#e8834c', '#5cc689', '#e0c14c', '#a77be0', '#e05c8a', '#4cd0d0', '#b0b8c4',
  '#7fa7ff', '#ffb07f', '#8fe3b0', '#fff07f', '#c9a8ff', '#ff8fb5', '#8ff0f0', '#d0d6de'];

const AXIS = { stroke: '#8b96a5', grid: { stroke: '#262d38', width: 1 }, ticks: { stroke: '#262d38' } };

/**
 * lineChart(container, { title, x, series: [{ label, values, colour?, width?, dash? }], unit, height })
 * Replaces the container's content with a uPlot chart; returns it.
 */
export function lineChart(container, { title, x, series, unit = '', height = 220, fmt = (v) => v }) {
  const box = el('div', { class: 'chart' }, el('h4', {}, title));
  container.replaceChildren(box);
  const width = Math.max(300, container.clientWidth - 8);
  const opts = {
    width,
    height,
    legend: { show: series.length <= 8, live: true },
    cursor: { drag: { x: true, y: false } },
    scales: { x: { time: false } },
    axes: [
      { ...AXIS, label: 'step', labelSize: 18, incrs: [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000] },
      { ...AXIS, label: unit, labelSize: 18, size: 60, values: (u, vals) => vals.map((v) => fmt(v)) },
    ],
    series: [
      { label: 'step' },
      ...series.map((s, i) => ({
        label: s.label,
        stroke: s.colour || PALETTE[i % PALETTE.length],
        width: s.width || 1.5,
        dash: s.dash,
        spanGaps: true,
        points: { show: x.length < 25 },
        value: (u, v) => (v === null || v === undefined ? '–' : fmt(v)),
      })),
    ],
  };
  // eslint-disable-next-line no-undef
  return new uPlot(opts, [x, ...series.map((s) => s.values)], box);
}
