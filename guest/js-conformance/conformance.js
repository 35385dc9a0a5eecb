// The lockd:lock conformance scenario in JavaScript, as a wasi:cli command.
//
// Usage: `js-conformance <prefix>`. Every lock name starts with `<prefix>/`,
// so one host can run the scenario many times. For each step it prints
// `ok <step>`, or `FAIL <step>: <detail>` and exits 1 at once. It exits 0 only
// if every step passed, and leaves `<prefix>/held` locked by owner `js` for
// 60 s (printing `held <token>`), so the host can check that persistent state
// outlives the instance. Step 13 runs a lease: it prints `lease <id>` and
// leaves nothing of the lease held.
//
// Built with componentize-js 0.23 (see build.sh). Conventions of its
// bindings, as used below:
// - u64 is a BigInt both ways, so tokens stay exact above 2^53.
// - A WIT `err` is thrown as a `ComponentError` (an Error) whose `payload` is
//   the error variant: `{ tag: 'busy', val: lockInfo }`, `{ tag: 'not-owner' }`,
//   `{ tag: 'invalid-argument', val: message }`, ...
// - `option<T>` is `T` or `undefined`; enums are their WIT names as strings.
// - A resource is dropped with `guard[Symbol.dispose]()`.
// - `run` returns `{ tag: 'err' }` to make the command exit with status 1.

import { lock, unlock, extend, get } from 'lockd:lock/locks@0.1.0';
import { Guard } from 'lockd:lock/guards@0.1.0';
import { Lease } from 'lockd:lock/leases@0.1.0';
import { getArguments } from 'wasi:cli/environment@0.2.10';

const TTL = 10000;
const PERSISTENT = { waitMs: 0, durability: 'persistent' };
const EPHEMERAL = { waitMs: 0, durability: 'ephemeral' };
const U64_MAX = (1n << 64n) - 1n;
// Without keep-alive: the scenario refreshes the lease itself, and a
// composed lockd-client on a foreign host answers keep-alive with `denied`.
const LEASE = { durability: 'persistent', keepAlive: false };

class Failed extends Error {
  constructor(step, detail) {
    super(`step ${step}: ${detail}`);
    this.step = step;
    this.detail = detail;
  }
}

// The step under way, for reporting an unexpected exception.
let currentStep = 1;

function say(line) {
  console.log(line);
}

function passed(step) {
  say(`ok ${step}`);
  currentStep = step + 1;
}

// Renders values (with BigInts) for failure messages.
function show(value) {
  if (value === undefined) {
    return 'undefined';
  }
  return JSON.stringify(value, (_, v) => {
    if (typeof v === 'bigint') return `${v}n`;
    if (v === undefined) return 'undefined';
    return v;
  });
}

// Calls a WIT function; returns { ok: value } or { err: errorVariant }.
function call(f, ...args) {
  try {
    return { ok: f(...args) };
  } catch (e) {
    if (e && Object.prototype.hasOwnProperty.call(e, 'payload')) {
      return { err: e.payload };
    }
    throw e;
  }
}

function expectOk(step, outcome) {
  if ('err' in outcome) {
    throw new Failed(step, `unexpected error ${show(outcome.err)}`);
  }
  return outcome.ok;
}

function isErr(outcome, tag) {
  return 'err' in outcome && outcome.err && outcome.err.tag === tag;
}

function sleep(ms) {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

// Whether `pollable` is ready now or becomes ready within `ms`.
async function readyWithin(pollable, ms) {
  const deadline = Date.now() + ms;
  while (!pollable.ready()) {
    if (Date.now() >= deadline) {
      return false;
    }
    await sleep(10);
  }
  return true;
}

async function scenario(p) {
  const a = `${p}/a`;
  const b = `${p}/b`;
  const g = `${p}/g`;
  const held = `${p}/held`;

  // 1. A free lock is granted.
  const t1 = expectOk(1, call(lock, a, 'o1', TTL, PERSISTENT)).fencingToken;
  if (typeof t1 !== 'bigint') {
    throw new Failed(1, `fencing token is a ${typeof t1}, not a BigInt`);
  }
  passed(1);

  // 2. Another owner gets `busy`, naming the holder and its token.
  let r = call(lock, a, 'o2', TTL, PERSISTENT);
  if (!(isErr(r, 'busy') && r.err.val.owner === 'o1' && r.err.val.fencingToken === t1)) {
    throw new Failed(2, `expected busy by "o1" token ${t1}, got ${show(r)}`);
  }
  passed(2);

  // 3. Re-locking by the holder is a retry: same token.
  let grant = expectOk(3, call(lock, a, 'o1', TTL, PERSISTENT));
  if (grant.fencingToken !== t1) {
    throw new Failed(3, `expected token ${t1}, got ${show(grant)}`);
  }
  const expiry3 = grant.expiresAtMs;
  passed(3);

  // 4. Only the holder may extend.
  r = call(extend, a, 'o2', TTL);
  if (!isErr(r, 'not-owner')) {
    throw new Failed(4, `expected not-owner, got ${show(r)}`);
  }
  passed(4);

  // 5. Extending keeps the token and moves the expiry later.
  grant = expectOk(5, call(extend, a, 'o1', 20000));
  if (!(grant.fencingToken === t1 && grant.expiresAtMs > expiry3)) {
    throw new Failed(5, `expected token ${t1}, expiry > ${expiry3}, got ${show(grant)}`);
  }
  passed(5);

  // 6. An unlock with a wrong token releases nothing.
  r = call(unlock, a, 'o1', (t1 + 1n) & U64_MAX);
  if (!isErr(r, 'not-owner')) {
    throw new Failed(6, `expected not-owner, got ${show(r)}`);
  }
  passed(6);

  // 7. An unlock with the right token releases the lock.
  expectOk(7, call(unlock, a, 'o1', t1));
  let info = expectOk(7, call(get, a));
  if (info !== undefined && info !== null) {
    throw new Failed(7, `expected none, got ${show(info)}`);
  }
  passed(7);

  // 8. The next grant of the same name has a greater token.
  grant = expectOk(8, call(lock, a, 'o2', TTL, PERSISTENT));
  if (!(grant.fencingToken > t1)) {
    throw new Failed(8, `expected token > ${t1}, got ${show(grant)}`);
  }
  expectOk(8, call(unlock, a, 'o2', grant.fencingToken));
  passed(8);

  // 9. An ephemeral lease expires by itself, and the next token is greater.
  const tb = expectOk(9, call(lock, b, 'o1', 100, EPHEMERAL)).fencingToken;
  await sleep(300);
  info = expectOk(9, call(get, b));
  if (info !== undefined && info !== null) {
    throw new Failed(9, `expected the lease to have expired, got ${show(info)}`);
  }
  grant = expectOk(9, call(lock, b, 'o2', TTL, EPHEMERAL));
  if (!(grant.fencingToken > tb)) {
    throw new Failed(9, `expected token > ${tb}, got ${show(grant)}`);
  }
  // Leave P/b free, like P/a.
  expectOk(9, call(unlock, b, 'o2', grant.fencingToken));
  passed(9);

  // 10. Limits are enforced.
  for (const [what, name, ttl] of [
    ['empty name', '', TTL],
    ['600-byte name', 'n'.repeat(600), TTL],
    ['ttl 0', a, 0],
  ]) {
    r = call(lock, name, 'o1', ttl, PERSISTENT);
    if (!isErr(r, 'invalid-argument')) {
      throw new Failed(10, `${what}: expected invalid-argument, got ${show(r)}`);
    }
  }
  passed(10);

  // 11. A guard holds the lock under a host-generated owner and releases it
  // when dropped.
  const guard = expectOk(11, call((...xs) => Guard.acquire(...xs), g, TTL, PERSISTENT));
  try {
    const owner = guard.owner();
    const token = guard.fencingToken();
    r = call(lock, g, 'o3', TTL, PERSISTENT);
    if (!(isErr(r, 'busy') && r.err.val.owner === owner && r.err.val.fencingToken === token)) {
      throw new Failed(11, `expected busy by ${show(owner)} token ${token}, got ${show(r)}`);
    }
    if (!guard.isHeld()) {
      throw new Failed(11, 'isHeld() returned false');
    }
  } finally {
    guard[Symbol.dispose]();
  }
  info = expectOk(11, call(get, g));
  if (info !== undefined && info !== null) {
    throw new Failed(11, `expected free after dropping the guard, got ${show(info)}`);
  }
  grant = expectOk(11, call(lock, g, 'o3', TTL, PERSISTENT));
  expectOk(11, call(unlock, g, 'o3', grant.fencingToken));
  passed(11);

  // 12. Leave a persistent lock behind for the host to inspect.
  grant = expectOk(12, call(lock, held, 'js', 60000, PERSISTENT));
  say(`held ${grant.fencingToken}`);
  passed(12);

  // 13. A lease owns two locks with its id as their owner and its expiry;
  // refresh moves both, revoke frees both, and a revoked lease locks
  // nothing.
  const names = [`${p}/lease/a`, `${p}/lease/b`];
  const lease = expectOk(13, call((...xs) => Lease.grant(...xs), TTL, LEASE));
  try {
    const leaseId = lease.id();
    const expiry = lease.expiresAtMs();
    say(`lease ${leaseId}`);
    if (!(leaseId.startsWith('lease-') && leaseId.length === 6 + 32)) {
      throw new Failed(13, `lease id ${show(leaseId)}`);
    }
    const tokens = [];
    for (const name of names) {
      grant = expectOk(13, call((n, w) => lease.lock(n, w), name, 0));
      if (grant.expiresAtMs !== expiry) {
        throw new Failed(13, `${name}: ${show(grant)}, lease expires at ${expiry}`);
      }
      tokens.push(grant.fencingToken);
    }
    // Locking again under the lease answers the same grant.
    grant = expectOk(13, call((n, w) => lease.lock(n, w), names[0], 0));
    if (!(grant.fencingToken === tokens[0] && grant.expiresAtMs === expiry)) {
      throw new Failed(13, `re-lock under the lease: ${show(grant)}`);
    }
    const ownedUntil = (until) => {
      names.forEach((name, i) => {
        const held = expectOk(13, call(get, name));
        if (!(held && held.owner === leaseId && held.fencingToken === tokens[i] &&
              held.expiresAtMs === until && held.durability === 'persistent')) {
          throw new Failed(13, `${name}: expected owner ${leaseId} token ${tokens[i]} ` +
                               `expiry ${until}, got ${show(held)}`);
        }
      });
    };
    ownedUntil(expiry);
    // Another owner is refused, and told the lease holds it.
    r = call(lock, names[0], 'o4', TTL, PERSISTENT);
    if (!(isErr(r, 'busy') && r.err.val.owner === leaseId)) {
      throw new Failed(13, `expected busy by ${leaseId}, got ${show(r)}`);
    }
    if (!lease.isAlive()) {
      throw new Failed(13, 'isAlive() false on a live lease');
    }
    let lost = lease.subscribeLost();
    const readyBefore = lost.ready();
    lost[Symbol.dispose]();
    if (readyBefore) {
      throw new Failed(13, 'lost pollable ready on a live lease');
    }

    await sleep(20);
    const refreshed = expectOk(13, call(() => lease.refresh()));
    if (!(refreshed > expiry && lease.expiresAtMs() === refreshed)) {
      throw new Failed(13, `refresh answered ${refreshed} (was ${expiry}), ` +
                           `expiresAtMs() ${lease.expiresAtMs()}`);
    }
    ownedUntil(refreshed);

    expectOk(13, call(() => lease.revoke()));
    for (const name of names) {
      info = expectOk(13, call(get, name));
      if (info !== undefined && info !== null) {
        throw new Failed(13, `${name} held after revoke: ${show(info)}`);
      }
    }
    if (lease.isAlive()) {
      throw new Failed(13, 'isAlive() true after revoke');
    }
    // Ready at once on lockd's host; composed with lockd-client on a
    // foreign host it is a zero-length timer, which wasmtime reports ready
    // from the second look on. Either way, promptly.
    lost = lease.subscribeLost();
    let readyAfter = false;
    try {
      readyAfter = await readyWithin(lost, 1000);
    } finally {
      lost[Symbol.dispose]();
    }
    if (!readyAfter) {
      throw new Failed(13, 'lost pollable not ready within 1 s of the revoke');
    }
    r = call((n, w) => lease.lock(n, w), names[0], 0);
    if (!isErr(r, 'not-held')) {
      throw new Failed(13, `lock under the revoked lease: expected not-held, got ${show(r)}`);
    }
    info = expectOk(13, call(get, names[0]));
    if (info !== undefined && info !== null) {
      throw new Failed(13, `${names[0]} held after a lock under the revoked lease`);
    }
  } finally {
    lease[Symbol.dispose](); // already revoked: nothing more happens
  }
  passed(13);
}

export const run = {
  async run() {
    const args = getArguments();
    if (args.length < 2) {
      console.error('usage: js-conformance <lock-name-prefix>');
      return { tag: 'err', val: undefined };
    }
    try {
      await scenario(args[1]);
    } catch (e) {
      if (e instanceof Failed) {
        say(`FAIL ${e.step}: ${e.detail}`);
      } else {
        say(`FAIL ${currentStep}: unexpected exception ${e && e.stack ? e.stack : e}`);
      }
      return { tag: 'err', val: undefined };
    }
    return { tag: 'ok', val: undefined };
  },
};
