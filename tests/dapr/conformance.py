"""Dapr's lock-store conformance checks (components-contrib
tests/conformance/lock), run by Dapr's own Python SDK (gRPC) against a lockd
serving Dapr's lock API. host/lockd/tests/dapr.rs runs it with the venv
scripts/install-dapr-sdks.sh made, and:
  DAPR_HTTP_ENDPOINT  lockd's HTTP listener (the SDK waits for /v1.0/healthz/outbound)
  DAPR_GRPC_ENDPOINT  lockd's --dapr-grpc-listen address
  STORE               the lock store name
  PREFIX              prefix of every resource id, unique per run
  UNDECLARED          if set, a store name no component declares: its TryLock and
                      Unlock must fail first with Dapr's error for it
                      (INVALID_ARGUMENT, "lock store NAME is not found"), as the
                      SDK raises it
  EXPECT_REFUSAL      if set, the gRPC code the first TryLock must fail with
                      (a token outside the store); checks only that
Prints one line per check, then `winner <owner>` of the contention check;
exits 1 at the first failed check."""

import os
import sys
import threading
import time
import warnings

from dapr.clients import DaprClient
from dapr.clients.grpc._response import UnlockResponseStatus

warnings.simplefilter("ignore")  # "The Distributed Lock API is an Alpha version"
store = os.environ["STORE"]
prefix = os.environ["PREFIX"]


def check(what, got, want):
    if got != want:
        print(f"FAIL {what}: got {got!r}, want {want!r}", flush=True)
        sys.exit(1)
    print(f"ok {what}", flush=True)


refusal = os.environ.get("EXPECT_REFUSAL")
if refusal:
    import grpc
    with DaprClient() as dapr:
        try:
            dapr.try_lock(store, f"{prefix}-refused", "owner1", 10)
            code = "OK"
        except grpc.RpcError as e:
            code = e.code().name
        check(f"refused: {refusal}", code, refusal)
    sys.exit(0)

def undeclared(dapr, name):
    import grpc
    want = ("INVALID_ARGUMENT", f"lock store {name} is not found")
    for what, call in (
        ("lock", lambda: dapr.try_lock(name, f"{prefix}-undeclared", "owner1", 10)),
        ("unlock", lambda: dapr.unlock(name, f"{prefix}-undeclared", "owner1")),
    ):
        try:
            call()
            got = ("OK", "")
        except grpc.RpcError as e:
            got = (e.code().name, e.details())
        check(f"undeclared store: {what} refused", got, want)


with DaprClient() as dapr:
    if os.environ.get("UNDECLARED"):
        undeclared(dapr, os.environ["UNDECLARED"])
    r = f"{prefix}-resource"
    check("acquire", dapr.try_lock(store, r, "owner1", 10).success, True)
    check("acquire by another owner fails", dapr.try_lock(store, r, "owner2", 10).success, False)
    check("acquire again by the owner fails", dapr.try_lock(store, r, "owner1", 10).success, False)
    check("unlock of a missing lock", dapr.unlock(store, r + "-missing", "owner1").status,
          UnlockResponseStatus.lock_does_not_exist)
    check("unlock by another owner", dapr.unlock(store, r, "owner2").status,
          UnlockResponseStatus.lock_belongs_to_others)
    check("unlock by the owner", dapr.unlock(store, r, "owner1").status, UnlockResponseStatus.success)

    expiring = f"{prefix}-expiring"
    check("acquire for 1 s", dapr.try_lock(store, expiring, "owner1", 1).success, True)
    check("held before its expiry", dapr.try_lock(store, expiring, "owner2", 1).success, False)
    time.sleep(1.1)
    check("after the expiry another owner acquires", dapr.try_lock(store, expiring, "owner2", 10).success, True)

    # Ten clients (each its own gRPC channel), one TryLock each, released together.
    contended = f"{prefix}-contended"
    clients = [DaprClient() for _ in range(10)]
    results = [None] * 10
    start = threading.Barrier(10)

    def race(i):
        start.wait()
        results[i] = clients[i].try_lock(store, contended, f"racer{i}", 30).success

    threads = [threading.Thread(target=race, args=(i,)) for i in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check("ten concurrent TryLocks: winners", results.count(True), 1)
    print(f"winner racer{results.index(True)}", flush=True)
    for c in clients:
        c.close()
