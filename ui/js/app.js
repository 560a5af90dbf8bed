// Entry point: hash routing, the token form, and the refresh loop.
//
// Routes: `#/` jobs list; `#/job/<job>?tab=overview|ranks|collectives|gpus|ops|memory|...
// &from_step=&to_step=&metric=&step=&rank=` a job; `#/fleet?by=&since=` the
// Fleet page (fleet.js). Each view is
// `{ render(main, params) -> Promise, refresh() -> Promise, dispose() }`;
// while a view is shown, `refresh` runs every POLL_MS (slower when the
// tab is hidden), so a running job's page follows it live.

import { ApiError, setToken, takeTokenFromUrl, token } from './api.js';
import { el } from './fmt.js';
import { jobsView } from './jobs.js';
import { jobView } from './job.js';
import { fleetView } from './fleet.js';

const POLL_MS = 5000;
const HIDDEN_POLL_MS = 30000;

let current = null; // the view on screen
let timer = null;
let generation = 0;

export function parseHash() {
  const h = location.hash.replace(/^#/, '') || '/';
  const [path, query] = h.split('?');
  const params = Object.fromEntries(new URLSearchParams(query || ''));
  const parts = path.split('/').filter(Boolean).map(decodeURIComponent);
  return { parts, params };
}

/** Updates the hash query without adding history entries or re-rendering. */
export function setParams(changes) {
  const { parts, params } = parseHash();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === '') delete params[k];
    else params[k] = String(v);
  }
  const q = new URLSearchParams(params).toString();
  const path = '#/' + parts.map(encodeURIComponent).join('/') + (q ? '?' + q : '');
  history.replaceState(null, '', path);
}

export function crumbs(...items) {
  const nav = document.getElementById('crumbs');
  nav.replaceChildren(...items.flatMap((it, i) => (i ? [el('span', { class: 'sep' }, '/'), it] : [it])));
}

export function setLive(text, live) {
  const e = document.getElementById('live');
  e.hidden = !text;
  e.textContent = text || '';
  e.classList.toggle('on', !!live);
}

/** Renders an API error in place of a view: the API's own message, and the token form on 401. */
export function showError(container, err) {
  const status = err instanceof ApiError ? err.status : 0;
  const box = el('div', { class: 'error', role: 'alert', dataset: { status } },
    el('strong', {}, status ? `${status}` : 'error'), ' ', el('span', { class: 'msg' }, err.message));
  if (err.path) box.append(el('div', { class: 'muted small' }, 'GET ' + err.path));
  container.replaceChildren(box);
  if (status === 401) container.append(tokenForm());
}

function tokenForm() {
  const input = el('input', { type: 'password', placeholder: 'bearer token (collector auth_token)', value: token(), autocomplete: 'off' });
  return el('form', {
    class: 'token-form',
    onsubmit: (e) => {
      e.preventDefault();
      setToken(input.value.trim());
      route();
    },
  }, input, el('button', { type: 'submit' }, 'Use token'),
  el('p', { class: 'muted small' }, 'Kept in this browser (localStorage). You can also open the UI with ?token=…'));
}

async function route() {
  const gen = ++generation;
  clearTimeout(timer);
  if (current) current.dispose();
  const main = document.getElementById('main');
  const { parts, params } = parseHash();
  setLive('', false);
  if (parts[0] === 'job' && parts[1]) current = jobView(parts[1]);
  else if (parts[0] === 'fleet') current = fleetView();
  else if (parts[0] === 'token') {
    current = null;
    crumbs(el('span', {}, 'token'));
    main.replaceChildren(tokenForm());
    return;
  } else current = jobsView();
  try {
    await current.render(main, params);
  } catch (e) {
    if (gen === generation) showError(main, e);
    return;
  }
  schedule(gen);
}

function schedule(gen) {
  timer = setTimeout(async () => {
    if (gen !== generation || !current) return;
    try {
      await current.refresh();
    } catch (e) {
      // A failed refresh keeps the last picture; the view shows the message.
      if (current.refreshError) current.refreshError(e);
    }
    if (gen === generation) schedule(gen);
  }, document.hidden ? HIDDEN_POLL_MS : POLL_MS);
}

takeTokenFromUrl();
document.getElementById('token-btn').onclick = () => { location.hash = '#/token'; };
window.addEventListener('hashchange', route);
route();
