// One job: tabs Overview (heatmap, (step, rank) breakdown, straggler
// verdicts, hangs, alerts), Ranks (stacked bars), Collectives (table and
// busbw over steps) and GPUs (telemetry over steps). Every number comes
// from the API; the page only divides by step medians for colours.

import { ApiError, get, jobPath } from './api.js';
import { ago, bytes, dur, el, ms, num, pct, time } from './fmt.js';
import { crumbs, setLive, setParams, showError } from './app.js';
import { METRICS, createHeatmap } from './heatmap.js';
import { drawRankBars, segments } from './bars.js';
import { PALETTE, lineChart } from './charts.js';
import { median } from './fmt.js';

const LIVE_NS = 60e9;
const TABS = ['overview', 'ranks', 'collectives', 'gpus'];
const TAB_LABELS = { overview: 'Overview', ranks: 'Ranks', collectives: 'Collectives', gpus: 'GPUs' };

/** Fields of the breakdown panel: [API field, label, formatter]. */
const BREAKDOWN_FIELDS = [
  ['step_time_ns', 'step time', ms],
  ['compute_ns', 'compute', ms],
  ['comm_ns', 'communication', ms],
  ['exposed_comm_ns', 'exposed comm', ms],
  ['overlap_ns', 'comm/comp overlap', ms],
  ['overlap_pct', 'overlap %', pct],
  ['comm_wait_ns', 'collective wait', ms],
  ['comm_transfer_ns', 'collective transfer', ms],
  ['memory_ns', 'memory', ms],
  ['idle_ns', 'GPU idle', ms],
  ['dataloader_ns', 'dataloader', ms],
  ['gpu_util_pct', 'GPU util', pct],
  ['sm_active_pct', 'SM active', pct],
  ['sm_clock_mhz', 'SM clock (MHz)', (v) => num(v, 0)],
  ['power_w', 'power (W)', (v) => num(v, 0)],
];

function card(title, ...body) {
  return el('section', { class: 'card' }, title ? el('h3', {}, title) : null, ...body);
}

export function jobView(job) {
  const st = {
    main: null,
    params: {},
    tab: 'overview',
    summary: null,
    matrix: null,
    stragglers: [],
    selected: null,
    heatmap: null,
    charts: [],
    disposed: false,
    live: false,
  };

  const activeFlags = () => {
    const m = new Map();
    for (const v of st.stragglers) {
      if (v.active) m.set(v.rank, `straggler: ${v.cause}, ${v.slowdown.toFixed(2)}x slower, steps ${v.first_step}-${v.last_step}`);
    }
    return m;
  };

  function range() {
    const p = st.params;
    return { from_step: p.from_step, to_step: p.to_step, last: p.last };
  }

  async function loadSummary() {
    const jobs = await get('/api/v1/jobs');
    st.summary = jobs.jobs.find((j) => j.job === job) || null;
    st.live = !!st.summary && Date.now() * 1e6 - st.summary.last_seen_ns < LIVE_NS;
    setLive(st.summary ? (st.live ? 'live · refreshing' : 'finished · last seen ' + ago(st.summary.last_seen_ns)) : '', st.live);
    const s = st.summary;
    document.getElementById('job-facts').replaceChildren(...(s ? [
      st.live ? el('span', { class: 'badge live' }, 'live') : el('span', { class: 'badge' }, 'finished'),
      el('span', {}, el('b', {}, s.ranks_seen), ' ranks'),
      el('span', {}, el('b', {}, s.nodes), ' nodes'),
      el('span', {}, 'last step ', el('b', {}, s.last_step ?? '–')),
      el('span', {}, 'started ', el('b', {}, time(s.first_seen_ns))),
      s.run_id ? el('span', {}, 'run ', el('b', {}, s.run_id)) : null,
    ].filter(Boolean) : []));
  }

  // ---- overview -------------------------------------------------------

  function overviewSkeleton(body) {
    const metric = st.params.metric || 'compute_ns';
    const select = el('select', { id: 'metric', onchange: (e) => { setParams({ metric: e.target.value }); st.params.metric = e.target.value; drawHeatmap(); } },
      ...Object.entries(METRICS).map(([k, m]) => el('option', { value: k, selected: k === metric, title: m.help }, m.label)));
    const from = el('input', { id: 'from-step', type: 'number', min: 0, placeholder: 'from', value: st.params.from_step || '' });
    const to = el('input', { id: 'to-step', type: 'number', min: 0, placeholder: 'to', value: st.params.to_step || '' });
    const form = el('form', {
      class: 'range',
      onsubmit: (e) => {
        e.preventDefault();
        st.params.from_step = from.value;
        st.params.to_step = to.value;
        delete st.params.last;
        setParams({ from_step: from.value, to_step: to.value, last: null });
        loadOverview().catch((err) => showError(document.getElementById('tab-body'), err));
      },
    }, 'steps ', from, '–', to, el('button', { type: 'submit' }, 'show'));
    body.replaceChildren(
      el('div', { class: 'overview' },
        el('div', { class: 'col-main' },
          card(null,
            el('div', { class: 'card-head' }, el('h3', {}, 'Rank × step'), el('span', { class: 'spacer' }),
              el('label', {}, 'colour by ', select), form),
            el('p', { class: 'muted small', id: 'metric-help' }, METRICS[metric]?.help || ''),
            el('div', { id: 'heatmap-box' }, el('p', { class: 'muted' }, 'Loading…'))),
          card('Straggler verdicts', el('div', { id: 'verdicts' }, el('p', { class: 'muted' }, 'Loading…')))),
        el('div', { class: 'col-side' },
          card('Breakdown', el('div', { id: 'breakdown' }, el('p', { class: 'muted' }, 'Click a cell of the heatmap.'))),
          card('Hangs', el('div', { id: 'hangs' })),
          card('Alerts', el('div', { id: 'alerts' })))));
  }

  function drawHeatmap() {
    const box = document.getElementById('heatmap-box');
    if (!box || !st.matrix) return;
    const metric = st.params.metric || 'compute_ns';
    document.getElementById('metric-help').textContent = METRICS[metric]?.help || '';
    if (!st.matrix.steps.length) {
      box.replaceChildren(el('p', { class: 'muted', id: 'no-steps' }, 'No finished steps in this range yet.'));
      st.heatmap = null;
      return;
    }
    if (!st.heatmap || !box.contains(st.heatmap.canvas)) {
      st.heatmap = createHeatmap(box, { onSelect: (s, r) => selectCell(s, r) });
    }
    st.heatmap.update(st.matrix, metric, activeFlags(), st.selected);
  }

  async function loadOverview() {
    const [m, stragglers, hangs, alerts] = await Promise.allSettled([
      get(jobPath(job, '/matrix'), { ...range(), fields: Object.keys(METRICS).join(',') }),
      get(jobPath(job, '/stragglers')),
      get(jobPath(job, '/hangs')),
      get('/api/v1/alerts', { job }),
    ]).then((rs) => {
      // An unknown job fails the page; a bad step range only the heatmap.
      const notFound = rs.find((r) => r.status === 'rejected' && r.reason.status === 404);
      if (notFound) throw notFound.reason;
      for (const r of rs.slice(1)) if (r.status === 'rejected') throw r.reason;
      return rs;
    });
    const matrix = m.status === 'fulfilled' ? m.value : { steps: [], ranks: [], nodes: [], values: {} };
    st.matrix = matrix;
    st.stragglers = stragglers.value.stragglers;
    if (!st.selected) {
      const p = st.params;
      if (p.step !== undefined && p.rank !== undefined) st.selected = { step: +p.step, rank: +p.rank };
      else {
        const v = st.stragglers.find((x) => x.active);
        if (v && matrix.steps.length) st.selected = { step: Math.min(v.last_step, matrix.steps[matrix.steps.length - 1]), rank: v.rank };
      }
    }
    if (m.status === 'fulfilled') drawHeatmap();
    else {
      st.heatmap = null;
      showError(document.getElementById('heatmap-box'), m.reason);
    }
    renderVerdicts();
    renderHangs(hangs.value.hangs);
    renderAlerts(alerts.value.alerts);
    if (st.selected) await loadBreakdown();
  }

  function selectCell(step, rank) {
    st.selected = { step, rank };
    setParams({ step, rank });
    if (st.heatmap) st.heatmap.select(step, rank);
    loadBreakdown().catch((e) => showError(document.getElementById('breakdown'), e));
  }

  async function loadBreakdown() {
    const { step, rank } = st.selected;
    const box = document.getElementById('breakdown');
    const doc = await get(jobPath(job, '/breakdown'), { step });
    const row = doc.breakdown.find((r) => r.rank === rank);
    if (!box) return;
    if (!row) {
      box.replaceChildren(el('p', { class: 'muted' }, `No breakdown for step ${step}, rank ${rank}.`));
      return;
    }
    const medOf = (field) => median(doc.breakdown.map((r) => r[field]));
    const rel = (field) => {
      const m = medOf(field);
      return m > 0 && row[field] !== null ? `${(row[field] / m).toFixed(2)}x` : '';
    };
    const seg = segments({ ...row, non_compute_ns: row.non_compute_ns });
    const total = Object.values(seg).reduce((a, b) => a + b, 0) || 1;
    box.replaceChildren(
      el('div', { class: 'bd-head', dataset: { step, rank } },
        el('b', {}, `step ${step} · rank ${rank}`), ' ', el('span', { class: 'muted' }, row.node),
        activeFlags().has(rank) ? el('span', { class: 'badge straggler' }, 'straggler') : null),
      el('div', { class: 'stack' }, ...[['compute', '#4c9be8'], ['exposed', '#e8834c'], ['memory', '#a77be0'], ['idle', '#3a4352']]
        .map(([k, c]) => el('i', { style: `width:${(100 * seg[k]) / total}%;background:${c}`, title: k }))),
      el('dl', { class: 'bd' }, ...BREAKDOWN_FIELDS.flatMap(([f, label, fmt]) => [
        el('dt', {}, label),
        el('dd', { dataset: { field: f, value: row[f] === null || row[f] === undefined ? '' : String(row[f]) } },
          el('span', { class: 'v' }, fmt(row[f])), f.endsWith('_ns') ? el('span', { class: 'rel muted' }, rel(f)) : null),
      ])),
      el('p', { class: 'muted small' }, 'x = this rank / median of the step\'s ranks.'));
  }

  function renderVerdicts() {
    const box = document.getElementById('verdicts');
    if (!box) return;
    if (!st.stragglers.length) {
      box.replaceChildren(el('p', { class: 'muted', id: 'no-verdicts' }, 'No straggler verdicts: every rank keeps pace.'));
      return;
    }
    const steps = st.matrix?.steps || [];
    const lo = steps.length ? steps[0] : 0;
    const hi = steps.length ? steps[steps.length - 1] : 1;
    const spanBar = (v) => {
      const a = Math.max(v.first_step, lo);
      const b = Math.min(v.last_step, hi);
      const w = hi > lo ? 100 / (hi - lo + 1) : 100;
      return el('div', { class: 'span-bar', title: `steps ${v.first_step}–${v.last_step}` },
        b >= a ? el('i', { class: v.active ? 'active' : '', style: `left:${(a - lo) * w}%;width:${Math.max(1, (b - a + 1) * w)}%` }) : null);
    };
    box.replaceChildren(el('table', { class: 'grid verdicts' },
      el('thead', {}, el('tr', {}, ...['rank', 'node', 'cause', 'slowdown', 'steps', 'over the range', 'state', 'evidence'].map((h) => el('th', {}, h)))),
      el('tbody', {}, st.stragglers.map((v) => el('tr', {
        class: 'verdict clickable' + (v.active ? ' active' : ''),
        dataset: { rank: v.rank, cause: v.cause },
        onclick: () => { if (steps.length) selectCell(Math.min(Math.max(v.last_step, lo), hi), v.rank); },
      },
      el('td', {}, el('span', { class: 'badge straggler' }, 'r' + v.rank)),
      el('td', {}, v.node),
      el('td', {}, el('span', { class: 'cause ' + v.cause }, v.cause)),
      el('td', { class: 'num' }, v.slowdown.toFixed(2) + 'x'),
      el('td', { class: 'num' }, `${v.first_step}–${v.last_step}`, el('div', { class: 'muted small' }, `${v.steps_flagged} flagged`)),
      el('td', {}, spanBar(v)),
      el('td', {}, v.active ? el('span', { class: 'badge hot' }, 'active') : el('span', { class: 'badge' }, 'resolved')),
      el('td', { class: 'evidence' }, v.evidence || el('span', { class: 'muted' }, 'no GPU evidence')))))));
  }

  function renderHangs(hangs) {
    const box = document.getElementById('hangs');
    if (!box) return;
    box.replaceChildren(hangs.length
      ? el('ul', { class: 'list' }, hangs.map((h) => el('li', { dataset: { rank: h.rank } },
        el('span', { class: 'badge hang' }, 'r' + h.rank), ` silent ${dur(h.silent_ns)} at step ${h.last_step < 0 ? '–' : h.last_step} (job at ${h.job_step})`)))
      : el('p', { class: 'muted' }, 'No hang suspects.'));
  }

  function renderAlerts(alerts) {
    const box = document.getElementById('alerts');
    if (!box) return;
    box.replaceChildren(alerts.length
      ? el('ul', { class: 'list' }, alerts.map((a) => el('li', { class: a.state },
        el('span', { class: 'badge ' + (a.state === 'firing' ? 'hot' : '') }, a.state), ' ',
        el('b', {}, a.rule), a.rank !== null ? ` r${a.rank}` : '', ' ', el('span', { class: 'muted small' }, ago(a.started_at_ns)),
        el('div', { class: 'small' }, a.summary))))
      : el('p', { class: 'muted' }, 'No alerts.'));
  }

  // ---- ranks ----------------------------------------------------------

  async function loadRanks(body) {
    const [ranks, stragglers] = await Promise.all([get(jobPath(job, '/ranks')), get(jobPath(job, '/stragglers'))]);
    st.stragglers = stragglers.stragglers;
    const flags = activeFlags();
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

  async function loadCollectives(body) {
    const [coll, perStep] = await Promise.all([
      get(jobPath(job, '/collectives')),
      get(jobPath(job, '/collectives/steps'), range()),
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
    else st.charts.push(lineChart(chartBox, { title: '', x: perStep.steps, series, unit: 'GB/s', fmt: (v) => v.toFixed(1) }));
    chartBox.append(el('p', { class: 'muted small' }, 'busbw = algbw × the nccl-tests factor of the op; per step over the collectives that started inside each rank\'s step.'));
  }

  // ---- GPUs -----------------------------------------------------------

  async function loadGpus(body) {
    const fields = ['gpu_util_pct', 'sm_active_pct', 'sm_clock_mhz', 'power_w'];
    const [gpus, matrix, stragglers] = await Promise.all([
      get('/api/v1/gpus', { job }),
      get(jobPath(job, '/matrix'), { ...range(), fields: fields.join(',') }),
      get(jobPath(job, '/stragglers')),
    ]);
    st.stragglers = stragglers.stragglers;
    const flags = activeFlags();
    const charts = el('div', { class: 'chart-grid' });
    body.replaceChildren(
      card('GPU telemetry over steps (mean of the rank\'s GPU samples in each step)', charts),
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
      charts.replaceChildren(el('p', { class: 'muted' }, 'No GPU samples during these steps.'));
      return;
    }
    const rankSeries = (f, ri) => matrix.steps.map((_, si) => matrix.values[f][ri * nS + si]);
    const titles = { gpu_util_pct: ['GPU utilisation', '%'], sm_active_pct: ['SM activity', '%'], sm_clock_mhz: ['SM clock', 'MHz'], power_w: ['power', 'W'] };
    // Boxes first, so that every chart is sized to its final grid cell.
    const boxes = fields.map(() => el('div', {}));
    charts.replaceChildren(...boxes);
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
      st.charts.push(lineChart(boxes[i], { title: titles[f][0], x: matrix.steps, series, unit: titles[f][1], height: 200, fmt: (v) => v.toFixed(0) }));
    });
    charts.after(el('p', { class: 'muted small' }, matrix.ranks.length <= 16
      ? `One line per rank's GPU${flagged.length ? '; red: straggler ' + flagged.map((r) => 'r' + r).join(', ') : ''}.`
      : `Min, median and max over ${matrix.ranks.length} ranks' GPUs${flagged.length ? '; red: straggler ' + flagged.map((r) => 'r' + r).join(', ') : ''}.`));
  }

  // ---- frame ----------------------------------------------------------

  async function loadTab() {
    const body = document.getElementById('tab-body');
    for (const c of st.charts.splice(0)) c.destroy();
    if (st.tab === 'overview') {
      if (!document.getElementById('heatmap-box')) overviewSkeleton(body);
      return loadOverview();
    }
    st.heatmap = null;
    if (st.tab === 'ranks') return loadRanks(body);
    if (st.tab === 'collectives') return loadCollectives(body);
    return loadGpus(body);
  }

  function frame() {
    const tabs = el('nav', { class: 'tabs' }, TABS.map((t) => el('a', {
      href: '#', class: t === st.tab ? 'on' : '', dataset: { tab: t },
      onclick: (e) => {
        e.preventDefault();
        st.tab = t;
        setParams({ tab: t === 'overview' ? null : t });
        for (const a of tabs.children) a.classList.toggle('on', a.dataset.tab === t);
        document.getElementById('tab-body').replaceChildren(el('p', { class: 'muted' }, 'Loading…'));
        loadTab().catch((err) => showError(document.getElementById('tab-body'), err));
      },
    }, TAB_LABELS[t])));
    st.main.replaceChildren(
      el('div', { class: 'job-head' }, el('h2', {}, job), el('div', { id: 'job-facts', class: 'facts' })),
      tabs,
      el('div', { id: 'tab-body' }));
  }

  return {
    async render(main, params) {
      st.main = main;
      st.params = { ...params };
      st.tab = TABS.includes(params.tab) ? params.tab : 'overview';
      crumbs(el('a', { href: '#/' }, 'jobs'), el('span', {}, job));
      frame();
      await loadSummary();
      try {
        await loadTab();
      } catch (e) {
        // An unknown job is the page's error; a bad range is the heatmap's.
        if (e instanceof ApiError && e.status === 404) throw e;
        showError(document.getElementById(st.tab === 'overview' ? 'heatmap-box' : 'tab-body') || main, e);
      }
    },
    async refresh() {
      const wasLive = st.live;
      await loadSummary();
      if (st.live || wasLive) await loadTab();
    },
    refreshError(e) {
      setLive('refresh failed: ' + e.message, false);
    },
    dispose() {
      st.disposed = true;
      for (const c of st.charts.splice(0)) c.destroy();
    },
  };
}
