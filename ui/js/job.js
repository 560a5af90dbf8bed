// One job: the page frame, the refresh, and the Overview tab (heatmap,
// (step, rank) breakdown, straggler verdicts, hangs, alerts); the Ranks,
// Collectives and GPUs tabs are in tabs.js. Every number comes from the
// API; the page only divides by step medians for colours and ratios.

import { ApiError, get, jobPath } from './api.js';
import { ago, dur, el, median, ms, num, pct, time } from './fmt.js';
import { crumbs, setLive, setParams, showError } from './app.js';
import { METRICS, createHeatmap } from './heatmap.js';
import { segments } from './bars.js';
import { activeFlags, loadCollectives, loadGpus, loadRanks } from './tabs.js';
import { EXTRA_TABS } from './profiler.js';
import { loadMemory, loadOps } from './views.js';

const LIVE_NS = 60e9;
// What each straggler cause means (the verdict table's tooltips).
const CAUSES = {
  compute: 'its compute (forward, backward, optimizer) takes longer',
  input: 'its dataloader / input time takes longer',
  communication: 'its own collective transfers take longer',
  other: 'its own time (step time minus collective wait) is longer outside forward, backward, optimizer and input',
};
const TABS = ['overview', 'ranks', 'collectives', 'gpus', 'ops', 'memory', ...Object.keys(EXTRA_TABS)];
const TAB_LABELS = { overview: 'Overview', ranks: 'Ranks', collectives: 'Collectives', gpus: 'GPUs', ops: 'Ops', memory: 'Memory',
  ...Object.fromEntries(Object.entries(EXTRA_TABS).map(([k, t]) => [k, t.label])) };

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

  const flags = () => activeFlags(st.stragglers);

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
      // The collector's warnings on the job (e.g. a world split across job
      // ids), spelled out here; the job list shows them as a badge.
      ...(s.warnings || []).map((w) => el('span', { class: 'badge warn job-warning' }, w)),
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
    st.heatmap.update(st.matrix, metric, flags(), st.selected);
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
        flags().has(rank) ? el('span', { class: 'badge straggler' }, 'straggler') : null),
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
      el('td', {}, el('span', { class: 'cause ' + v.cause, title: CAUSES[v.cause] || '' }, v.cause)),
      el('td', { class: 'num' }, v.slowdown.toFixed(2) + 'x'),
      el('td', { class: 'num' }, `${v.first_step}–${v.last_step}`, el('div', { class: 'muted small' }, `${v.steps_flagged} flagged`)),
      el('td', {}, spanBar(v)),
      el('td', {}, v.active ? el('span', { class: 'badge hot' }, 'active') : el('span', { class: 'badge' }, 'resolved')),
      el('td', { class: 'evidence' }, v.evidence || el('span', { class: 'muted' }, v.cause === 'other' ? 'no evidence yet' : 'no GPU evidence')))))));
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

  // ---- frame ----------------------------------------------------------

  async function loadTab() {
    const body = document.getElementById('tab-body');
    for (const c of st.charts.splice(0)) c.destroy();
    if (st.tab === 'overview') {
      if (!document.getElementById('heatmap-box')) overviewSkeleton(body);
      return loadOverview();
    }
    st.heatmap = null;
    if (st.tab === 'ranks') return loadRanks(body, job);
    if (st.tab === 'collectives') return loadCollectives(body, job, range(), st.charts);
    if (st.tab === 'ops' || st.tab === 'memory') return (st.tab === 'ops' ? loadOps(body, job) : loadMemory(body, job, st.charts));
    if (EXTRA_TABS[st.tab]) return EXTRA_TABS[st.tab].load(body, job);
    return loadGpus(body, job, range(), st.charts);
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
