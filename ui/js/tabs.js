// The job page's Ranks, Collectives and GPUs tabs. Each loader fetches
// its routes and replaces `body`; uPlot charts are pushed onto `charts` so
// the page can destroy them on the next refresh.

import { get, jobPath } from './api.js';
import { bytes, dur, el, median, num, pct } from './fmt.js';
import { drawRankBars, segments } from './bars.js';
import { PALETTE, lineChart } from './charts.js';

function card(title, ...body) {
  return el('section', { class: 'card' }, title ? el('h3', {}, title) : null, ...body);
}

/** rank -> description of the ranks with an active straggler verdict. */
export function activeFlags(stragglers) {
  const m = new Map();
  for (const v of stragglers) {
    if (v.active) m.set(v.rank, `straggler: ${v.cause}, ${v.slowdown.toFixed(2)}x ${v.cause === 'other' ? 'the median own time' : 'slower'}, steps ${v.first_step}-${v.last_step}`);
  }
  return m;
}

// ---- ranks ----------------------------------------------------------

export async function loadRanks(body, job) {
  const [ranks, stragglers] = await Promise.all([get(jobPath(job, '/ranks')), get(jobPath(job, '/stragglers'))]);
  const flags = activeFlags(stragglers.stragglers);
  const barsBox = el('div', { id: 'rank-bars' });
  body.replaceChildren(
    card('Per-rank time breakdown (whole job, % of GPU span)', barsBox),
    card('Ranks', el('div', { class: 'scroll' }, el('table', { class: 'grid ranks' },
      el('thead', {}, el('tr', {}, ...['rank', 'node', 'GPU span', 'compute', 'exposed comm', 'memory / other', 'idle', 'overlap'].map((h) => el('th', {}, h)))),
      el('tbody', {}, ranks.ranks.map((r) => {
        const s = segments(r);
        const p = (x) => pct((100 * x) / (r.gpu_span_ns || 1));
        return el('tr', { dataset: { rank: r.rank }, class: flags.has(r.rank) ? 'flagged' : '' },
          el('td', {}, flags.has(r.rank) ? el('span', { class: 'badge straggler' }, 'r' + r.rank) : 'r' + r.rank),
          el('td', {}, r.node), el('td', { class: 'num' }, dur(r.gpu_span_ns)),
          el('td', { class: 'num' }, p(s.compute)), el('td', { class: 'num' }, p(s.exposed)),
          el('td', { class: 'num' }, p(s.memory)), el('td', { class: 'num' }, p(s.idle)),
          el('td', { class: 'num' }, pct(r.overlap_pct)));
      }))))));
  drawRankBars(barsBox, ranks.ranks, { flags, onSelect: (rank) => { location.hash = `#/job/${encodeURIComponent(job)}?rank=${rank}`; } });
}

// ---- collectives ----------------------------------------------------

export async function loadCollectives(body, job, range, charts) {
  const [coll, perStep] = await Promise.all([
    get(jobPath(job, '/collectives')),
    get(jobPath(job, '/collectives/steps'), range),
  ]);
  const chartBox = el('div', { id: 'busbw-chart' });
  const rows = coll.collectives;
  body.replaceChildren(
    card('Bus bandwidth over steps (nccl-tests busbw)', chartBox),
    card('Collectives (job-wide)', rows.length ? el('div', { class: 'scroll' }, el('table', { class: 'grid collectives' },
      el('thead', {}, el('tr', {}, ...['process group', 'op', 'dtype', 'size', 'calls', 'mean', 'p99', 'algbw', 'busbw', 'wait vs transfer'].map((h) => el('th', {}, h)))),
      el('tbody', {}, rows.map((c) => {
        const t = c.wait_ns + c.transfer_ns || 1;
        return el('tr', {},
          el('td', {}, c.process_group), el('td', {}, c.op), el('td', {}, c.dtype), el('td', {}, c.size_bucket),
          el('td', { class: 'num' }, c.calls), el('td', { class: 'num' }, dur(c.mean_duration_ns)), el('td', { class: 'num' }, dur(c.p99_duration_ns)),
          el('td', { class: 'num' }, c.algbw_gbps === null ? '–' : c.algbw_gbps.toFixed(1) + ' GB/s'),
          el('td', { class: 'num' }, c.busbw_gbps === null ? '–' : c.busbw_gbps.toFixed(1) + ' GB/s'),
          el('td', {}, el('div', { class: 'wt', title: `wait ${dur(c.wait_ns)} · transfer ${dur(c.transfer_ns)} (summed over ranks)` },
            el('i', { class: 'wait', style: `width:${(100 * c.wait_ns) / t}%` }), el('i', { class: 'xfer', style: `width:${(100 * c.transfer_ns) / t}%` })),
          el('span', { class: 'muted small' }, `${pct((100 * c.wait_ns) / t)} wait`)));
      })))) : el('p', { class: 'muted' }, 'No collectives.')));
  const series = perStep.series
    .map((s) => ({ s, n: s.busbw_gbps.filter((v) => v !== null).length }))
    .sort((a, b) => b.n - a.n)
    .slice(0, 12)
    .map(({ s }, i) => ({ label: `${s.process_group} ${s.op} ${s.dtype} ${s.size_bucket}`, values: s.busbw_gbps, colour: PALETTE[i] }));
  if (!perStep.steps.length || !series.length) chartBox.replaceChildren(el('p', { class: 'muted' }, 'No collectives in this step range.'));
  else charts.push(lineChart(chartBox, { title: '', x: perStep.steps, series, unit: 'GB/s', fmt: (v) => v.toFixed(1) }));
  chartBox.append(el('p', { class: 'muted small' }, 'busbw = algbw × the nccl-tests factor of the op; per step over the collectives that started inside each rank\'s step.'));
}

// ---- GPUs -----------------------------------------------------------

export async function loadGpus(body, job, range, charts) {
  const fields = ['gpu_util_pct', 'sm_active_pct', 'sm_clock_mhz', 'power_w'];
  const [gpus, matrix, stragglers] = await Promise.all([
    get('/api/v1/gpus', { job }),
    get(jobPath(job, '/matrix'), { ...range, fields: fields.join(',') }),
    get(jobPath(job, '/stragglers')),
  ]);
  const flags = activeFlags(stragglers.stragglers);
  const grid = el('div', { class: 'chart-grid' });
  body.replaceChildren(
    card('GPU telemetry over steps (mean of the rank\'s GPU samples in each step)', grid),
    card('GPUs of the job (latest sample)', gpus.gpus.length ? el('div', { class: 'scroll' }, el('table', { class: 'grid gpus' },
      el('thead', {}, el('tr', {}, ...['node', 'GPU', 'name', 'ranks', 'util', 'SM active', 'SM clock', 'power', 'temp', 'memory', 'throttle'].map((h) => el('th', {}, h)))),
      el('tbody', {}, gpus.gpus.map((g) => el('tr', { class: g.state !== 'ok' ? 'bad' : g.ranks.some((r) => r.job === job && flags.has(r.rank)) ? 'flagged' : '' },
        el('td', {}, g.node), el('td', { class: 'num' }, g.gpu_index), el('td', {}, g.name),
        el('td', {}, g.ranks.filter((r) => r.job === job).map((r) => 'r' + r.rank).join(' ')),
        el('td', { class: 'num' }, pct(g.gpu_util_pct)), el('td', { class: 'num' }, pct(g.sm_active_pct)),
        el('td', { class: 'num' }, g.sm_clock_mhz === null ? '–' : `${g.sm_clock_mhz} / ${g.sm_clock_max_mhz ?? '–'} MHz`),
        el('td', { class: 'num' }, g.power_w === null ? '–' : `${num(g.power_w, 0)} / ${num(g.power_limit_w, 0)} W`),
        el('td', { class: 'num' }, g.temp_c === null ? '–' : num(g.temp_c, 0) + ' °C'),
        el('td', { class: 'num' }, `${bytes(g.mem_used_bytes)} / ${bytes(g.mem_total_bytes)}`),
        el('td', {}, g.throttle_reasons === null ? '–' : g.throttle_reasons.join(', ') || 'none')))))) : el('p', { class: 'muted' }, 'No GPU samples for this job: the agent sends them when NVML is available on the node.')));
  const nS = matrix.steps.length;
  const any = fields.some((f) => matrix.values[f].some((v) => v !== null));
  if (!any) {
    grid.replaceChildren(el('p', { class: 'muted' }, 'No GPU samples during these steps.'));
    return;
  }
  const rankSeries = (f, ri) => matrix.steps.map((_, si) => matrix.values[f][ri * nS + si]);
  const titles = { gpu_util_pct: ['GPU utilisation', '%'], sm_active_pct: ['SM activity', '%'], sm_clock_mhz: ['SM clock', 'MHz'], power_w: ['power', 'W'] };
  // Boxes first, so that every chart is sized to its final grid cell.
  const boxes = fields.map(() => el('div', {}));
  grid.replaceChildren(...boxes);
  const flagged = [...flags.keys()].filter((r) => matrix.ranks.includes(r));
  fields.forEach((f, i) => {
    let series;
    if (matrix.ranks.length <= 16) {
      series = matrix.ranks.map((r, ri) => (flags.has(r)
        ? { label: `r${r} (straggler)`, values: rankSeries(f, ri), colour: '#ff5a5a', width: 2.5 }
        : { label: 'r' + r, values: rankSeries(f, ri), colour: PALETTE[ri % PALETTE.length] + '99', width: 1 }));
    } else {
      const stat = (fn) => matrix.steps.map((_, si) => fn(matrix.ranks.map((_, ri) => matrix.values[f][ri * nS + si]).filter((v) => v !== null)));
      series = [
        { label: 'min', values: stat((v) => (v.length ? Math.min(...v) : null)), colour: '#5a6b80', dash: [4, 4] },
        { label: 'median', values: stat((v) => (v.length ? median(v) : null)), colour: '#b0b8c4' },
        { label: 'max', values: stat((v) => (v.length ? Math.max(...v) : null)), colour: '#5a6b80', dash: [4, 4] },
        ...flagged.map((r) => ({ label: `r${r} (straggler)`, values: rankSeries(f, matrix.ranks.indexOf(r)), colour: '#ff5a5a', width: 2.5 })),
      ];
    }
    charts.push(lineChart(boxes[i], { title: titles[f][0], x: matrix.steps, series, unit: titles[f][1], height: 200, fmt: (v) => v.toFixed(0) }));
  });
  grid.after(el('p', { class: 'muted small' }, matrix.ranks.length <= 16
    ? `One line per rank's GPU${flagged.length ? '; red: straggler ' + flagged.map((r) => 'r' + r).join(', ') : ''}.`
    : `Min, median and max over ${matrix.ranks.length} ranks' GPUs${flagged.length ? '; red: straggler ' + flagged.map((r) => 'r' + r).join(', ') : ''}.`));
}
