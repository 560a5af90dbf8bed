// The collector's HTTP API, with the bearer token the collector may require
// on /api/* (`auth_token`). The token comes from `?token=` or `#...&token=`
// in the URL once (then it is removed from the address bar) or from the
// token form, and is kept in localStorage under `rankscope.token`.

const KEY = 'rankscope.token';

export class ApiError extends Error {
  constructor(status, message, path) {
    super(message);
    this.status = status;
    this.path = path;
  }
}

/** Moves a token given in the URL into localStorage. */
export function takeTokenFromUrl() {
  const u = new URL(location.href);
  let tok = u.searchParams.get('token');
  if (tok !== null) u.searchParams.delete('token');
  const m = u.hash.match(/[?&]token=([^&]*)/);
  if (m) {
    tok = decodeURIComponent(m[1]);
    u.hash = u.hash.replace(/([?&])token=[^&]*&?/, '$1').replace(/[?&]$/, '');
  }
  if (tok !== null) {
    setToken(tok);
    history.replaceState(null, '', u.pathname + u.search + u.hash);
  }
}

export function token() {
  return localStorage.getItem(KEY) || '';
}

export function setToken(t) {
  if (t) localStorage.setItem(KEY, t);
  else localStorage.removeItem(KEY);
}

/** GET a JSON document; throws ApiError with the API's `error` message on 4xx/5xx. */
export async function get(path, params = {}) {
  const url = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== '') url.searchParams.set(k, v);
  }
  const headers = { Accept: 'application/json' };
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  let r;
  try {
    r = await fetch(url, { headers, cache: 'no-store' });
  } catch (e) {
    throw new ApiError(0, 'collector unreachable: ' + e.message, path);
  }
  let body = null;
  try {
    body = await r.json();
  } catch {
    body = null;
  }
  if (!r.ok) {
    const msg = body && body.error ? body.error : `${r.status} ${r.statusText}`;
    throw new ApiError(r.status, msg, url.pathname + url.search);
  }
  return body;
}

export const jobPath = (job, rest = '') => `/api/v1/jobs/${encodeURIComponent(job)}${rest}`;
