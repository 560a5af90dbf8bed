// The Ops and Memory tabs of the job page: the Operator and Memory views of
// the job's traced ranks (GET /ops, /memory), and its live memory (RSS or
// the SDK's per-step peaks). Every number comes from the API; nothing is
// computed here but the curve's x axis (ms from the first point). The
// job-wide memory answer is bounded (the curve of the ranks with the largest
// peaks); choosing a rank asks for that rank's whole curve (`rank=R`).

import { get, jobPath } from './api.js';
import { bytes, el, num, pct } from './fmt.js';
import { PALETTE, lineChart } from './charts.js';

function card(title, ...body) {
  return el('section', { class: 'card' }, title ? el('h3', {}, title) : null, ...body);
}

function table(cls, heads, rows) {
  return el('div', { class: 'scroll' }, el('table', { class: 'grid ' + cls },
    el('thead', {}, el('tr', {}, ...heads.map((h) => el('th', {}, h)))),
    el('tbody', {}, rows)));
}

const us = (v) => num(v, 1);

/** A frame `file(line): function` as a link that opens the source in VS Code. */
function frameLink(f) {
  return el('a', { href: `vscode://file/${f.file}:${f.line}`, dataset: { frame: `${f.file}:${f.line}` } },
    `${f.file}:${f.line}`);
}

export async function loadOps(body, job) {
  const all = await get(jobPath(job, '/ops'), { top: 50 });
  if (!all.rows.length) {
    body.replaceChildren(card('Operators', el('p', { class: 'muted' }, all.notes.join(' ') || 'No operator records.')));
    return;
  }
  const rank = all.rows[0].host_self_max_rank;
  const mine = await get(jobPath(job, '/ops'), { rank, group_by: 'stack', top: 50 });
  const shapes = await get(jobPath(job, '/ops'), { rank, group_by: 'shape', top: 50 });
  const byShape = shapes.rows.length && shapes.rows[0].input_shape !== undefined;
  body.replaceChildren(
    card('Operators across ranks (median over ranks, the max and its rank; PyTorch Profiler definitions)',
      table('ops', ['operator', 'ranks', 'calls (median)', 'host self µs (median)', 'host self µs (max)', 'max rank',
        'device self µs (median)', 'device self µs (max)', 'max rank'],
      all.rows.map((r) => el('tr', { dataset: { op: r.name } },
        el('td', {}, r.name), el('td', { class: 'num' }, r.ranks), el('td', { class: 'num' }, num(r.calls_median, 1)),
        el('td', { class: 'num', dataset: { field: 'host_self_us_median' } }, us(r.host_self_us_median)),
        el('td', { class: 'num' }, us(r.host_self_us_max)), el('td', { class: 'num' }, 'r' + r.host_self_max_rank),
        el('td', { class: 'num' }, us(r.device_self_us_median)), el('td', { class: 'num' }, us(r.device_self_us_max)),
        el('td', { class: 'num' }, 'r' + r.device_self_max_rank))))),
    card(`Rank ${rank} by call stack`,
      mine.notes.length ? el('p', { class: 'muted' }, mine.notes.join(' ')) : null,
      table('ops-rank', ['operator', 'calls', 'host self µs', 'host total µs', 'device self µs', 'device total µs',
        'TC eligible', 'TC self %', 'stack'],
      mine.rows.map((r) => el('tr', { dataset: { op: r.name } },
        el('td', {}, r.name), el('td', { class: 'num' }, r.calls),
        el('td', { class: 'num', dataset: { field: 'host_self_us' } }, us(r.host_self_us)),
        el('td', { class: 'num' }, us(r.host_total_us)), el('td', { class: 'num' }, us(r.device_self_us)),
        el('td', { class: 'num' }, us(r.device_total_us)), el('td', {}, r.tc_eligible ? 'yes' : 'no'),
        el('td', { class: 'num' }, pct(r.tc_self_pct)),
        el('td', {}, ...(r.frames || []).slice(0, 4).flatMap((f, i) => (i ? [' < ', frameLink(f)] : [frameLink(f)])))))),
    byShape ? card(`Rank ${rank} by input shape (record_shapes=True)`,
      table('ops-shape', ['operator', 'input shape', 'calls', 'host self µs', 'host total µs', 'device self µs', 'device total µs'],
        shapes.rows.map((r) => el('tr', { dataset: { op: r.name, shape: r.input_shape } },
          el('td', {}, r.name), el('td', {}, r.input_shape), el('td', { class: 'num' }, r.calls),
          el('td', { class: 'num', dataset: { field: 'host_self_us' } }, us(r.host_self_us)),
          el('td', { class: 'num' }, us(r.host_total_us)), el('td', { class: 'num' }, us(r.device_self_us)),
          el('td', { class: 'num' }, us(r.device_total_us)))))) : null));
}

/** The allocated-bytes chart of `curve` (points of up to 8 (rank, device) series). */
function curveChart(box, curve) {
  const keys = [...new Set(curve.map((c) => `r${c.rank} ${c.device}`))].slice(0, 8);
  const xs = [...new Set(curve.map((c) => c.ts_ns))].sort((a, b) => a - b);
  const idx = new Map(xs.map((x, i) => [x, i]));
  const series = keys.map((k, i) => {
    const values = xs.map(() => null);
    for (const c of curve) if (`r${c.rank} ${c.device}` === k) values[idx.get(c.ts_ns)] = c.allocated_bytes / 1048576;
    return { label: k, values, colour: PALETTE[i % PALETTE.length], width: 1.5 };
  });
  return lineChart(box, { title: 'allocated', x: xs.map((x) => (x - xs[0]) / 1e6), series, unit: 'MiB', fmt: (v) => num(v, 1) });
}

export async function loadMemory(body, job, charts) {
  const m = await get(jobPath(job, '/memory'), { ops: true, curve: true, events: true, limit: 200 });
  const cards = [];
  if (m.notes.length) cards.push(el('p', { class: 'muted' }, m.notes.join(' ')));
  let plot = null;
  if (m.peaks.length) {
    cards.push(card('Peak memory per rank and device (trace [memory] events)',
      table('mem-peaks', ['rank', 'device', 'peak allocated', 'peak reserved'],
        m.peaks.map((p) => el('tr', { dataset: { peak: `${p.rank}/${p.device}`, bytes: p.peak_allocated_bytes } },
          el('td', {}, 'r' + p.rank), el('td', {}, p.device),
          el('td', { class: 'num' }, bytes(p.peak_allocated_bytes)), el('td', { class: 'num' }, bytes(p.peak_reserved_bytes)))))));
  }
  if (m.curve.length) {
    const box = el('div', { id: 'memory-curve' });
    const ranks = [...new Set(m.peaks.map((p) => p.rank))];
    const pick = el('select', { id: 'memory-rank' },
      el('option', { value: '' }, 'largest peaks (job)'), ...ranks.map((r) => el('option', { value: String(r) }, 'r' + r)));
    let drawn = null;
    const draw = (curve) => {
      const i = drawn ? charts.indexOf(drawn) : -1;
      if (i >= 0) charts.splice(i, 1)[0].destroy();
      drawn = curveChart(box, curve);
      box.dataset.points = String(curve.length);
      box.dataset.rank = pick.value;
      charts.push(drawn);
    };
    pick.addEventListener('change', async () => {
      if (pick.value === '') return draw(m.curve);
      const one = await get(jobPath(job, '/memory'), { rank: pick.value, curve: true });
      return draw(one.curve);
    });
    cards.push(card(`Memory curve (allocated; ${m.curve.length} of ${m.curve_points_total} points)`,
      el('p', { class: 'muted small' }, 'rank: ', pick), box));
    plot = () => draw(m.curve);
  }
  if (m.live.ranks.length) {
    cards.push(card(`Live memory per rank (largest: r${m.live.max_rank}, ${bytes(m.live.max_peak_bytes)})`,
      table('mem-live', ['rank', 'source', 'peak', 'device / node memory', 'headroom', 'peak step'],
        m.live.ranks.map((r) => el('tr', { dataset: { liveRank: r.rank, bytes: r.peak_bytes } },
          el('td', {}, 'r' + r.rank), el('td', {}, r.source), el('td', { class: 'num' }, bytes(r.peak_bytes)),
          el('td', { class: 'num' }, r.total_bytes ? bytes(r.total_bytes) : '–'),
          el('td', { class: 'num' }, r.headroom_pct === null ? '–' : pct(r.headroom_pct)),
          el('td', { class: 'num' }, r.peak_step))))));
  }
  if (m.ops.length) {
    const of = m.ops_total > m.ops.length ? ` (the ${m.ops.length} of ${m.ops_total} rows with the largest size increase)` : '';
    cards.push(card(`Memory per operator (PyTorch Profiler definitions)${of}`,
      table('mem-ops', ['rank', 'device', 'operator', 'calls', 'size increase', 'self size increase', 'allocations',
        'self allocations', 'allocation size', 'self allocation size'],
      m.ops.slice(0, 200).map((o) => el('tr', { dataset: { memOp: `${o.rank}/${o.device}/${o.name}`, bytes: o.size_increase_bytes } },
        el('td', {}, 'r' + o.rank), el('td', {}, o.device), el('td', {}, o.name), el('td', { class: 'num' }, o.calls),
        el('td', { class: 'num' }, bytes(o.size_increase_bytes)), el('td', { class: 'num' }, bytes(o.self_size_increase_bytes)),
        el('td', { class: 'num' }, o.allocation_count), el('td', { class: 'num' }, o.self_allocation_count),
        el('td', { class: 'num' }, bytes(o.allocation_size_bytes)), el('td', { class: 'num' }, bytes(o.self_allocation_size_bytes)))))));
  }
  if (m.events && m.events.length) {
    cards.push(card(`Allocation / release events (first ${m.events.length} of ${m.events_total})`,
      table('mem-events', ['rank', 'device', 'time (ns)', 'bytes', 'total allocated', 'total reserved', 'operator'],
        m.events.map((e) => el('tr', { dataset: { bytes: e.bytes } },
          el('td', {}, 'r' + e.rank), el('td', {}, e.device), el('td', { class: 'num' }, e.ts_ns),
          el('td', { class: 'num' }, e.bytes), el('td', { class: 'num' }, bytes(e.total_allocated_bytes)),
          el('td', { class: 'num' }, bytes(e.total_reserved_bytes)), el('td', {}, e.operator))))));
  }
  body.replaceChildren(...cards);
  if (plot) plot();
}
