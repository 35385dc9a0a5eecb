// Dapr's lock-store conformance checks (components-contrib
// tests/conformance/lock), run by Dapr's own JavaScript SDK against a lockd
// serving Dapr's lock API. host/lockd/tests/dapr.rs runs it with NODE_PATH
// pointing at the SDK scripts/install-dapr-sdks.sh installed, and:
//   DAPR_HOST, DAPR_PORT  where lockd listens (HTTP, or gRPC with DAPR_PROTOCOL=grpc)
//   STORE                 the lock store name
//   PREFIX                prefix of every resource id, unique per run
//   UNDECLARED            if set, a store name no component declares: its lock
//                         and unlock must fail first with Dapr's
//                         ERR_LOCK_STORE_NOT_FOUND (HTTP 400, gRPC INVALID_ARGUMENT),
//                         as the SDK surfaces it
//   EXPECT_REFUSAL        if set, the HTTP status the first lock must fail with
//                         (a token outside the store); checks only that
// DAPR_HOST may be https://HOST (the SDK then speaks HTTPS); the SDK sends
// DAPR_API_TOKEN as dapr-api-token.
// Prints one line per check, then `winner <owner>` of the contention check;
// exits 1 at the first failed check.
"use strict";
const { DaprClient, CommunicationProtocolEnum } = require("@dapr/dapr");
const { LockStatus } = require("@dapr/dapr/types/lock/UnlockResponse");
const { Code } = require("@connectrpc/connect");

const protocol =
  process.env.DAPR_PROTOCOL === "grpc" ? CommunicationProtocolEnum.GRPC : CommunicationProtocolEnum.HTTP;
const store = process.env.STORE;
const prefix = process.env.PREFIX;

function client() {
  return new DaprClient({
    daprHost: process.env.DAPR_HOST,
    daprPort: process.env.DAPR_PORT,
    communicationProtocol: protocol,
    logger: { level: 0 },
  });
}

function check(what, got, want) {
  if (got !== want) {
    console.log(`FAIL ${what}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
    process.exit(1);
  }
  console.log(`ok ${what}`);
}

async function refused(want) {
  const dapr = client();
  let status = "none";
  try {
    await dapr.lock.lock(store, `${prefix}-refused`, "owner1", 10);
  } catch (e) {
    status = String(JSON.parse(e.message).status);
  }
  check(`refused: ${want}`, status, want);
  await dapr.stop();
}

// What the SDK surfaces for Dapr's error: over HTTP an Error whose message is
// JSON `{error, error_msg: <body>, status}`, over gRPC a ConnectError with the
// status code and message. `[code, errorCode, message]`; `errorCode` is only
// on HTTP.
function daprError(e) {
  if (protocol === CommunicationProtocolEnum.GRPC) {
    return [Code[e.code], "", e.rawMessage];
  }
  const outer = JSON.parse(e.message);
  const body = JSON.parse(outer.error_msg);
  return [String(outer.status), body.errorCode, body.message];
}

async function undeclared(dapr, name) {
  const want =
    protocol === CommunicationProtocolEnum.GRPC
      ? ["InvalidArgument", "", `lock store ${name} is not found`]
      : ["400", "ERR_LOCK_STORE_NOT_FOUND", `lock store ${name} is not found`];
  for (const [what, call] of [
    ["lock", () => dapr.lock.lock(name, `${prefix}-undeclared`, "owner1", 10)],
    ["unlock", () => dapr.lock.unlock(name, `${prefix}-undeclared`, "owner1")],
  ]) {
    let got = "no error";
    try {
      await call();
    } catch (e) {
      got = daprError(e);
    }
    check(`undeclared store: ${what} refused`, JSON.stringify(got), JSON.stringify(want));
  }
}

async function main() {
  if (process.env.EXPECT_REFUSAL) {
    return refused(process.env.EXPECT_REFUSAL);
  }
  const dapr = client();
  if (process.env.UNDECLARED) {
    await undeclared(dapr, process.env.UNDECLARED);
  }
  const r = `${prefix}-resource`;
  check("acquire", (await dapr.lock.lock(store, r, "owner1", 10)).success, true);
  check("acquire by another owner fails", (await dapr.lock.lock(store, r, "owner2", 10)).success, false);
  check("acquire again by the owner fails", (await dapr.lock.lock(store, r, "owner1", 10)).success, false);
  check("unlock of a missing lock", (await dapr.lock.unlock(store, `${r}-missing`, "owner1")).status, LockStatus.LockDoesNotExist);
  check("unlock by another owner", (await dapr.lock.unlock(store, r, "owner2")).status, LockStatus.LockBelongsToOthers);
  check("unlock by the owner", (await dapr.lock.unlock(store, r, "owner1")).status, LockStatus.Success);

  const expiring = `${prefix}-expiring`;
  check("acquire for 1 s", (await dapr.lock.lock(store, expiring, "owner1", 1)).success, true);
  check("held before its expiry", (await dapr.lock.lock(store, expiring, "owner2", 1)).success, false);
  await new Promise((done) => setTimeout(done, 1100));
  check("after the expiry another owner acquires", (await dapr.lock.lock(store, expiring, "owner2", 10)).success, true);

  // Ten clients, one TryLock each, all at once: exactly one wins.
  const contended = `${prefix}-contended`;
  const clients = Array.from({ length: 10 }, client);
  const results = await Promise.all(
    clients.map((c, i) => c.lock.lock(store, contended, `racer${i}`, 30).then((res) => res.success)),
  );
  check("ten concurrent TryLocks: winners", results.filter(Boolean).length, 1);
  console.log(`winner racer${results.indexOf(true)}`);
  await Promise.all([dapr, ...clients].map((c) => c.stop()));
}

main().catch((e) => {
  console.log(`FAIL ${e && e.stack ? e.stack : e}`);
  process.exit(1);
});
