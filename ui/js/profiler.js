// The job page's Profile tab (issue 29): the PyTorch Profiler TensorBoard
// plugin's overview per rank with the job-wide spread, TorchInductor's GPU
// time per kernel category, and the advice list. Renders from
// /overview, /kernels?by=category and /advice; every number shown is the
// API's, formatted by fmt.js (pct: 1 decimal). Registered in job.js
// through EXTRA_TABS.

import { get, jobPath } from './api.js';
import { dur, el, num, pct } from './fmt.js';

function card(title, ...body) {
  return el('section', { class: 'card' }, title ? el('h3', {}, title) : null, ...body);
}

function table(cls, headers, rows) {
  return el('div', { class: 'scroll' }, el('table', { class: 'grid ' + cls },
    el('thead', {}, el('tr', {}, ...headers.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows)));
}

/** A cell with the API field it shows, for tests. */
function cell(field, text) {
  return el('td', { class: 'num', dataset: { field } }, text);
}

const OVERVIEW = [
  ['gpu_util_pct', 'GPU util', pct],
  ['sm_efficiency_pct', 'Est. SM eff.', pct],
  ['achieved_occupancy_pct', 'Est. occupancy', pct],
  ['tensor_core_pct', 'Tensor Cores', pct],
  ['step_us', 'step (µs)', (v) => num(v, 1)],
  ['kernel_us', 'kernel', (v) => num(v, 1)],
  ['memcpy_us', 'memcpy', (v) => num(v, 1)],
  ['memset_us', 'memset', (v) => num(v, 1)],
  ['communication_us', 'comm', (v) => num(v, 1)],
  ['runtime_us', 'runtime', (v) => num(v, 1)],
  ['dataloader_us', 'dataloader', (v) => num(v, 1)],
  ['other_us', 'other', (v) => num(v, 1)],
];

async function loadProfile(body, job) {
  const [ov, cats, adv] = await Promise.all([
    get(jobPath(job, '/overview')),
    get(jobPath(job, '/kernels'), { by: 'category' }),
    get(jobPath(job, '/advice')),
  ]);
  const spread = ov.job_wide || {};
  body.replaceChildren(
    card('Overview (TensorBoard plugin definitions, per rank)',
      table('profile-overview', ['rank', ...OVERVIEW.map((f) => f[1])],
        ov.overview.map((r) => el('tr', { dataset: { rank: r.rank } },
          el('td', {}, 'r' + r.rank),
          ...OVERVIEW.map(([f, , fmt]) => cell(f, fmt(r[f])))))),
      table('profile-spread', ['figure', 'min', 'median', 'max', 'outlier rank'],
        OVERVIEW.filter(([f]) => spread[f]).map(([f, label]) => el('tr', { dataset: { field: f } },
          el('td', {}, label), cell('min', num(spread[f].min, 2)), cell('median', num(spread[f].median, 2)),
          cell('max', num(spread[f].max, 2)),
          el('td', {}, spread[f].outlier_rank === null ? '–' : 'r' + spread[f].outlier_rank))))),
    card('Kernels by TorchInductor category',
      table('profile-categories', ['rank', 'category', 'calls', 'time', '% of span', '% of GPU time'],
        cats.kernels.map((c) => el('tr', { dataset: { rank: c.rank === null ? 'job' : c.rank, category: c.category } },
          el('td', {}, c.rank === null ? 'job' : 'r' + c.rank), el('td', {}, c.category),
          cell('calls', String(c.calls)), cell('sum_ns', dur(c.sum_ns)),
          cell('pct_of_wall', pct(c.pct_of_wall)), cell('pct_of_gpu_time', pct(c.pct_of_gpu_time))))),
      el('p', { class: 'muted small' }, cats.busy.map((b) =>
        `${b.rank === null ? 'job' : 'r' + b.rank}: GPU busy ${pct(b.busy_pct)}`).join(' · '))),
    card('Advice',
      adv.advice.length
        ? el('ul', { class: 'profile-advice' }, adv.advice.map((a) => el('li', { dataset: { rule: a.rule } },
          el('b', {}, a.rule), ' ', el('span', { class: 'muted small' }, a.ranks.map((r) => 'r' + r).join(' ')),
          el('div', { class: 'small' }, a.text))))
        : el('p', { class: 'muted' }, 'No rule fired.'),
      ...adv.not_evaluated.map((n) => el('p', { class: 'muted small' }, `not evaluated: ${n.rule} (${n.reason})`))));
}

/** Tabs this module adds to the job page: id -> { label, load(body, job) }. */
export const EXTRA_TABS = { profile: { label: 'Profile', load: loadProfile } };
