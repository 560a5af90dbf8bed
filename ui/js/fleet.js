// The Fleet page (`#/fleet?by=node|gpu|link&since=7d`): which nodes, GPUs or
// links keep slowing jobs down, across every job (`GET /api/v1/fleet`).
// A ranked table (worst first by recurrence score; low-exposure rows last,
// unranked) and, per row, a timeline of its straggler verdicts across jobs
// over the window (one mark per verdict at its first-seen time). Computes
// nothing: every number is the API's.

import { get } from './api.js';
import { ago, el, num } from './fmt.js';
import { crumbs, setLive, setParams } from './app.js';

const BY = ['node', 'gpu', 'link'];
const SINCE = ['1d', '7d', '30d', '90d'];

function timeline(row, sinceNs, nowNs) {
  const span = Math.max(1, nowNs - sinceNs);
  const strip = el('div', { class: 'fleet-timeline', dataset: { verdicts: row.timeline.length } });
  for (const v of row.timeline) {
    const left = Math.min(100, Math.max(0, (100 * (v.first_seen_ns - sinceNs)) / span));
    const href = '#/job/' + encodeURIComponent(v.job) + '?tab=ranks';
    strip.append(el('a', {
      class: 'mark', href, style: `left:${left.toFixed(2)}%`,
      title: `${v.job} rank ${v.rank}: ${num((v.slowdown - 1) * 100, 0)}% slower (${v.cause}), steps ${v.first_step}–${v.last_step}, ${ago(v.first_seen_ns)}`,
      dataset: { job: v.job, rank: v.rank },
    }));
  }
  return strip;
}

function hardware(hw) {
  const parts = [];
  if (hw.clock_below_peers) parts.push(`clock below peers ×${hw.clock_below_peers}`);
  parts.push(...hw.throttle_reasons);
  const counters = [['xid_errors', 'Xid'], ['ecc_uncorrected_errors', 'ECC uncorrected'],
    ['ecc_corrected_errors', 'ECC corrected'], ['pcie_replays', 'PCIe replays']];
  for (const [key, label] of counters) if (hw[key]) parts.push(`${label} ×${hw[key]}`);
  return el('span', { title: hw.evidence.join('\n') }, parts.join(', ') || '–');
}

export function fleetView() {
  let main = null;
  let params = {};

  async function load() {
    const by = BY.includes(params.by) ? params.by : 'node';
    const since = params.since || '7d';
    const body = await get('/api/v1/fleet', { by, since });
    const nowNs = Date.now() * 1e6;
    const unit = (r) => (by === 'gpu' ? r.gpu_uuid : by === 'link' ? r.link : r.node);
    const rows = body.rows.map((r) => el('tr', {
      class: r.low_exposure ? 'muted' : '',
      dataset: { unit: unit(r), node: r.node, place: r.place ?? '', score: r.score, lowExposure: r.low_exposure },
    },
    el('td', { class: 'num' }, r.place ?? '–'),
    el('td', {}, r.node),
    by !== 'node' ? el('td', {}, unit(r)) : null,
    el('td', { class: 'num' }, r.jobs),
    el('td', { class: 'num' }, num(r.rank_hours, 1)),
    el('td', { class: 'num' }, `${r.verdicts}`),
    el('td', { class: 'num' }, r.hang_suspects),
    el('td', { class: 'num' }, num(r.cost_gpu_hours, 2)),
    el('td', { class: 'num' }, r.low_exposure ? el('span', { class: 'badge warn' }, 'low exposure') : num(r.score, 1)),
    el('td', {}, hardware(r.hardware)),
    el('td', { class: 'fleet-cell' }, timeline(r, body.since_ns, nowNs))));
    const choose = (key, values, current) => el('span', { class: 'choices' }, key + ': ',
      ...values.map((v) => el('a', {
        href: '#', class: v === current ? 'on' : '',
        onclick: (e) => { e.preventDefault(); params[key] = v; setParams({ [key]: v }); load(); },
      }, v, ' ')));
    const table = el('table', { class: 'grid fleet', dataset: { by } },
      el('thead', {}, el('tr', {},
        el('th', { class: 'num' }, '#'), el('th', {}, 'node'), by !== 'node' ? el('th', {}, by) : null,
        el('th', { class: 'num' }, 'jobs'), el('th', { class: 'num' }, 'rank-h'),
        el('th', { class: 'num' }, 'verdicts'), el('th', { class: 'num' }, 'hangs'),
        el('th', { class: 'num' }, 'GPU-h lost'),
        el('th', { class: 'num', title: '-log10 P[X ≥ verdicts], X ~ Binomial(placements, fleet rate)' }, 'score'),
        el('th', {}, 'hardware'), el('th', {}, 'verdicts over the window'))),
      el('tbody', {}, rows));
    setLive(`${body.rows.length} ${by}s · fleet rate ${num(body.base_rate * 100, 2)}%`, false);
    main.replaceChildren(el('section', { class: 'card' },
      el('h2', {}, 'Fleet'),
      el('p', { class: 'muted small' }, choose('by', BY, by), ' ', choose('since', SINCE, since)),
      body.rows.length ? table : el('p', { class: 'muted' }, 'No rank was seen in this window.')));
  }

  return {
    async render(m, p) {
      main = m;
      params = { ...p };
      crumbs(el('a', { href: '#/' }, 'jobs'), el('span', {}, 'fleet'));
      await load();
    },
    refresh: load,
    dispose() {},
  };
}
