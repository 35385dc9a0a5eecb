// The example edge app's JavaScript edge function: a wasi:http handler built
// with componentize-js (fetch-event style) that runs each job while holding
// the lockd lock `js-job/{id}`.
//
// Mounted at the route `/js/jobs/...`; the full request path arrives in the
// request URL (the `spin-path-info` header is not relied on).
//
// - POST /js/jobs/{id} takes `js-job/{id}` (TTL 30 s, no waiting,
//   persistent) for an owner unique to this request (`js-<16 hex digits>`
//   from crypto.getRandomValues), works for about 200 ms, writes
//   `job {id} token {N}` to stderr, unlocks with the fencing token and
//   answers 200 {"status":"done","fencing_token":N}. A lock held by someone
//   else answers 409 {"status":"busy","holder":"<owner>"}.
// - GET /js/jobs/{id} answers 200 {"status":"free"} or
//   200 {"status":"held","owner":"...","fencing_token":N,"expires_at_ms":M}.
// - Any other lock error answers 503 (unavailable) or 500 (anything else)
//   with {"status":"error","message":"..."}.
// - Other methods on /js/jobs/{id} answer 405; other paths 404.
//
// `{id}` is one non-empty path segment, used as it appears in the URL (not
// percent-decoded).
//
// Conventions of the componentize-js 0.23 bindings (see
// ../js-conformance/conformance.js): u64 is a BigInt both ways; a WIT `err`
// is thrown as an Error whose `payload` is the variant, e.g.
// `{ tag: 'busy', val: lockInfo }`; `option<T>` is `T` or `undefined`.
// BigInts are written into JSON as plain digits, so tokens above 2^53 stay
// exact.

import { lock, unlock, get } from 'lockd:lock/locks@0.1.0';

const TTL_MS = 30000;
const WORK_MS = 200;
const PERSISTENT_NO_WAIT = { waitMs: 0, durability: 'persistent' };
const ROUTE = /^\/js\/jobs\/([^/]+)$/;

addEventListener('fetch', (event) => event.respondWith(handle(event.request)));

async function handle(request) {
  const match = ROUTE.exec(pathOf(request.url));
  if (!match) {
    return reply(404, { status: 'error', message: 'not found' });
  }
  const id = match[1];
  const name = `js-job/${id}`;
  try {
    switch (request.method) {
      case 'POST':
        return await runJob(id, name);
      case 'GET':
        return lockState(name);
      default:
        return reply(405, { status: 'error', message: 'method not allowed' }, { allow: 'GET, POST' });
    }
  } catch (e) {
    return errorReply(e);
  }
}

// POST /js/jobs/{id}: lock, work, unlock. Lock errors are thrown to handle().
async function runJob(id, name) {
  const owner = `js-${randomHex(8)}`;
  const grant = lock(name, owner, TTL_MS, PERSISTENT_NO_WAIT);
  const token = grant.fencingToken;
  // The "work": a real job would pass `token` to the store it writes.
  await new Promise((resolve) => setTimeout(resolve, WORK_MS));
  console.error(`job ${id} token ${token}`);
  // Unlock with the token, so that this can never release a later grant.
  unlock(name, owner, token);
  return reply(200, { status: 'done', fencing_token: token });
}

// GET /js/jobs/{id}: the lock's current state.
function lockState(name) {
  const info = get(name);
  if (info === undefined) {
    return reply(200, { status: 'free' });
  }
  return reply(200, {
    status: 'held',
    owner: info.owner,
    fencing_token: info.fencingToken,
    expires_at_ms: info.expiresAtMs,
  });
}

// 409 for busy (naming the holder), 503 for unavailable, 500 otherwise.
function errorReply(e) {
  const err = e && e.payload;
  if (err && err.tag === 'busy') {
    return reply(409, { status: 'busy', holder: err.val.owner });
  }
  if (err && err.tag === 'unavailable') {
    return reply(503, { status: 'error', message: `unavailable: ${err.val}` });
  }
  const message = err ? (err.val === undefined ? err.tag : `${err.tag}: ${err.val}`) : String(e);
  return reply(500, { status: 'error', message });
}

function reply(status, body, headers = {}) {
  return new Response(toJson(body), {
    status,
    headers: { 'content-type': 'application/json', ...headers },
  });
}

// JSON for a flat object whose BigInt values are written as exact numbers.
function toJson(obj) {
  const fields = Object.entries(obj).map(([key, value]) => {
    const text = typeof value === 'bigint' ? value.toString() : JSON.stringify(value);
    return `${JSON.stringify(key)}:${text}`;
  });
  return `{${fields.join(',')}}`;
}

// The path of a request URL, whether absolute ("http://host/p?q") or not
// ("/p?q"), without the query.
function pathOf(url) {
  const rest = url.replace(/^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/, '');
  const path = rest.split(/[?#]/, 1)[0];
  return path === '' ? '/' : path;
}

function randomHex(bytes) {
  const buf = new Uint8Array(bytes);
  crypto.getRandomValues(buf);
  return Array.from(buf, (b) => b.toString(16).padStart(2, '0')).join('');
}
