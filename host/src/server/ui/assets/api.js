// Calls to the node's /v1 API with the admin token the operator typed
// (kept in this tab's sessionStorage only). Errors carry the node's own
// words: {"error":{"code","message"}}.

const TOKEN_KEY = 'shardalloc-admin-token';

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

export function headers(extra = {}) {
  const all = { ...extra };
  const t = token();
  if (t) all.Authorization = `Bearer ${t}`;
  return all;
}

// The path of an API call, relative to the page (/ui/), so the page works
// behind a path prefix too.
export function url(path) {
  return `..${path}`;
}

export function segment(text) {
  return encodeURIComponent(text);
}

async function errorOf(response) {
  let code = 'http-' + response.status;
  let message = `the node answered ${response.status} ${response.statusText}`;
  try {
    const body = await response.json();
    if (body && body.error) {
      code = body.error.code;
      message = body.error.message;
    }
  } catch (_) {
    // Not JSON: keep the status line.
  }
  return new ApiError(response.status, code, message);
}

export async function call(method, path, body, contentType = 'application/json') {
  const init = { method, headers: headers(), cache: 'no-store' };
  if (body !== undefined) {
    init.headers['Content-Type'] = contentType;
    init.body = contentType === 'application/json' ? JSON.stringify(body) : body;
  }
  let response;
  try {
    response = await fetch(url(path), init);
  } catch (error) {
    throw new ApiError(0, 'unreachable', `the node did not answer: ${error.message}`);
  }
  if (!response.ok) throw await errorOf(response);
  if (response.status === 204) return null;
  const text = await response.text();
  return text ? JSON.parse(text) : null;
}

export const get = (path) => call('GET', path);

// Items per page the dashboard asks for (the node allows up to 10,000):
// half of that, so the browser test's 10,000 shards come in two pages.
export const PAGE_LIMIT = 5000;

// Every page of a list: the first page's body, with `field` holding the
// items of all the pages (each read after the previous one's `next`).
export async function allPages(path, field) {
  const separator = path.includes('?') ? '&' : '?';
  const first = await get(`${path}${separator}limit=${PAGE_LIMIT}`);
  let next = first.next;
  while (next) {
    const page = await get(`${path}${separator}limit=${PAGE_LIMIT}&after=${encodeURIComponent(next)}`);
    for (const item of page[field]) first[field].push(item);
    next = page.next;
  }
  first.next = null;
  return first;
}

// The node's Prometheus text, for the latency chart (no token needed).
export async function metrics() {
  const response = await fetch(url('/metrics'), { cache: 'no-store' });
  if (!response.ok) throw await errorOf(response);
  return response.text();
}

export { errorOf };
