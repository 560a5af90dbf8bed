// The jobs list: newest first (the API's order), with badges for the
// job's firing straggler and hang alerts (`/api/v1/alerts?active=true`) and
// the collector's warnings on the job (`warnings`, e.g. a split world).

import { get } from './api.js';
import { ago, el } from './fmt.js';
import { crumbs, setLive } from './app.js';

const LIVE_NS = 60e9; // seen within a minute: running

export function jobsView() {
  let main = null;

  async function load() {
    const [jobs, alerts] = await Promise.all([
      get('/api/v1/jobs'),
      get('/api/v1/alerts', { active: 'true' }),
    ]);
    const byJob = new Map();
    for (const a of alerts.alerts) {
      const m = byJob.get(a.job) || { straggler: [], hang: [], other: [] };
      (m[a.rule] || m.other).push(a);
      byJob.set(a.job, m);
    }
    const now = Date.now() * 1e6;
    const rows = jobs.jobs.map((j) => {
      const a = byJob.get(j.job) || { straggler: [], hang: [], other: [] };
      const live = now - j.last_seen_ns < LIVE_NS;
      const badges = [
        live ? el('span', { class: 'badge live' }, 'live') : null,
        a.straggler.length
          ? el('span', { class: 'badge straggler', title: a.straggler.map((x) => x.summary).join('\n') },
            `straggler ${a.straggler.map((x) => 'r' + x.rank).join(' ')}`)
          : null,
        a.hang.length
          ? el('span', { class: 'badge hang', title: a.hang.map((x) => x.summary).join('\n') }, 'hang')
          : null,
        a.other.length ? el('span', { class: 'badge warn' }, `${a.other.length} alert${a.other.length > 1 ? 's' : ''}`) : null,
        // The collector's warnings on the job (a world that arrived under
        // several job ids: README "Job attribution").
        (j.warnings || []).length
          ? el('span', { class: 'badge warn', title: j.warnings.join('\n'), dataset: { warnings: String(j.warnings.length) } },
            j.warnings.length > 1 ? `${j.warnings.length} warnings` : 'warning')
          : null,
      ];
      const href = '#/job/' + encodeURIComponent(j.job);
      return el('tr', { dataset: { job: j.job }, class: 'clickable', onclick: () => { location.hash = href; } },
        el('td', {}, el('a', { href }, j.job), j.run_id ? el('span', { class: 'muted small' }, ' run ' + j.run_id) : null),
        el('td', { class: 'badges' }, badges),
        el('td', { class: 'num' }, j.ranks_seen + (j.world_size && j.world_size !== j.ranks_seen ? ' / ' + j.world_size : '')),
        el('td', { class: 'num' }, j.nodes),
        el('td', { class: 'num' }, j.last_step ?? '–'),
        el('td', {}, ago(j.first_seen_ns)),
        el('td', {}, ago(j.last_seen_ns)));
    });
    const table = el('table', { class: 'grid jobs' },
      el('thead', {}, el('tr', {},
        el('th', {}, 'job'), el('th', {}, 'status'), el('th', { class: 'num' }, 'ranks'),
        el('th', { class: 'num' }, 'nodes'), el('th', { class: 'num' }, 'last step'),
        el('th', {}, 'started'), el('th', {}, 'last seen'))),
      el('tbody', {}, rows));
    const liveCount = jobs.jobs.filter((j) => now - j.last_seen_ns < LIVE_NS).length;
    setLive(`${liveCount} live · ${jobs.jobs.length} jobs`, liveCount > 0);
    main.replaceChildren(
      el('section', { class: 'card' },
        el('h2', {}, 'Jobs ', el('a', { class: 'small', href: '#/fleet', dataset: { link: 'fleet' } }, 'Fleet →')),
        jobs.jobs.length ? table : el('p', { class: 'muted' }, 'No jobs yet. Start one with `rankscope run` or `rankscope simulate`.')));
  }

  return {
    async render(m) {
      main = m;
      crumbs(el('span', {}, 'jobs'));
      await load();
    },
    refresh: load,
    dispose() {},
  };
}
