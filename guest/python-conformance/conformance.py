"""The lockd:lock conformance scenario in Python, as a wasi:cli command.

Usage: `python-conformance <prefix>`. Every lock name starts with `<prefix>/`,
so one host can run the scenario many times. For each step it prints
`ok <step>`, or `FAIL <step>: <detail>` and exits 1 at once. It exits 0 only
if every step passed, and leaves `<prefix>/held` locked by owner `python` for
60 s (printing `held <token>`), so the host can check that persistent state
outlives the instance. Step 13 runs a lease: it prints `lease <id>` and
leaves nothing of the lease held.

Built with componentize-py (see build.sh). A WIT `result` error arrives as the
exception `componentize_py_types.Err`, whose `.value` is one of the
`Error_*` dataclasses of `wit_world.imports.types`. Tokens are Python ints,
so u64 values are exact.
"""

import sys
import time

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import environment, locks
from wit_world.imports.guards import Guard
from wit_world.imports.leases import Lease, LeaseOptions
from wit_world.imports.locks import LockOptions
from wit_world.imports.types import (
    Durability,
    Error_Busy,
    Error_InvalidArgument,
    Error_NotHeld,
    Error_NotOwner,
)

TTL = 10_000
PERSISTENT = LockOptions(wait_ms=0, durability=Durability.PERSISTENT)
EPHEMERAL = LockOptions(wait_ms=0, durability=Durability.EPHEMERAL)
# Without keep-alive: the scenario refreshes the lease itself, and a
# composed lockd-client on a foreign host answers keep-alive with `denied`.
LEASE = LeaseOptions(durability=Durability.PERSISTENT, keep_alive=False)


class Failed(Exception):
    """A step failed; the scenario stops."""

    def __init__(self, step: int, detail: object) -> None:
        super().__init__(step, detail)
        self.step = step
        self.detail = detail


# The step under way, for reporting an unexpected Python exception.
current_step = 1


def say(line: str) -> None:
    print(line)
    sys.stdout.flush()


def passed(step: int) -> None:
    global current_step
    say(f"ok {step}")
    current_step = step + 1


def call(f, *args):
    """Calls a WIT function and returns ("ok", value) or ("err", error)."""
    try:
        return ("ok", f(*args))
    except Err as e:
        return ("err", e.value)


def expect_ok(step: int, outcome):
    kind, value = outcome
    if kind != "ok":
        raise Failed(step, f"unexpected error {value!r}")
    return value


def ready_within(pollable, seconds: float) -> bool:
    """Whether `pollable` is ready now or becomes ready within `seconds`."""
    deadline = time.monotonic() + seconds
    while not pollable.ready():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def scenario(p: str) -> None:
    a, b, g, held = f"{p}/a", f"{p}/b", f"{p}/g", f"{p}/held"

    # 1. A free lock is granted.
    t1 = expect_ok(1, call(locks.lock, a, "o1", TTL, PERSISTENT)).fencing_token
    passed(1)

    # 2. Another owner gets `busy`, naming the holder and its token.
    kind, v = call(locks.lock, a, "o2", TTL, PERSISTENT)
    if not (
        kind == "err"
        and isinstance(v, Error_Busy)
        and v.value.owner == "o1"
        and v.value.fencing_token == t1
    ):
        raise Failed(2, f"expected busy by 'o1' token {t1}, got {kind} {v!r}")
    passed(2)

    # 3. Re-locking by the holder is a retry: same token.
    grant = expect_ok(3, call(locks.lock, a, "o1", TTL, PERSISTENT))
    if grant.fencing_token != t1:
        raise Failed(3, f"expected token {t1}, got {grant!r}")
    expiry3 = grant.expires_at_ms
    passed(3)

    # 4. Only the holder may extend.
    kind, v = call(locks.extend, a, "o2", TTL)
    if not (kind == "err" and isinstance(v, Error_NotOwner)):
        raise Failed(4, f"expected not-owner, got {kind} {v!r}")
    passed(4)

    # 5. Extending keeps the token and moves the expiry later.
    grant = expect_ok(5, call(locks.extend, a, "o1", 20_000))
    if not (grant.fencing_token == t1 and grant.expires_at_ms > expiry3):
        raise Failed(5, f"expected token {t1}, expiry > {expiry3}, got {grant!r}")
    passed(5)

    # 6. An unlock with a wrong token releases nothing.
    kind, v = call(locks.unlock, a, "o1", (t1 + 1) % 2**64)
    if not (kind == "err" and isinstance(v, Error_NotOwner)):
        raise Failed(6, f"expected not-owner, got {kind} {v!r}")
    passed(6)

    # 7. An unlock with the right token releases the lock.
    expect_ok(7, call(locks.unlock, a, "o1", t1))
    info = expect_ok(7, call(locks.get, a))
    if info is not None:
        raise Failed(7, f"expected none, got {info!r}")
    passed(7)

    # 8. The next grant of the same name has a greater token.
    grant = expect_ok(8, call(locks.lock, a, "o2", TTL, PERSISTENT))
    if not grant.fencing_token > t1:
        raise Failed(8, f"expected token > {t1}, got {grant!r}")
    expect_ok(8, call(locks.unlock, a, "o2", grant.fencing_token))
    passed(8)

    # 9. An ephemeral lease expires by itself, and the next token is greater.
    tb = expect_ok(9, call(locks.lock, b, "o1", 100, EPHEMERAL)).fencing_token
    time.sleep(0.3)
    info = expect_ok(9, call(locks.get, b))
    if info is not None:
        raise Failed(9, f"expected the lease to have expired, got {info!r}")
    grant = expect_ok(9, call(locks.lock, b, "o2", TTL, EPHEMERAL))
    if not grant.fencing_token > tb:
        raise Failed(9, f"expected token > {tb}, got {grant!r}")
    # Leave P/b free, like P/a.
    expect_ok(9, call(locks.unlock, b, "o2", grant.fencing_token))
    passed(9)

    # 10. Limits are enforced.
    for what, name, ttl in (
        ("empty name", "", TTL),
        ("600-byte name", "n" * 600, TTL),
        ("ttl 0", a, 0),
    ):
        kind, v = call(locks.lock, name, "o1", ttl, PERSISTENT)
        if not (kind == "err" and isinstance(v, Error_InvalidArgument)):
            raise Failed(10, f"{what}: expected invalid-argument, got {kind} {v!r}")
    passed(10)

    # 11. A guard holds the lock under a host-generated owner and releases it
    # when dropped: leaving the `with` block drops the resource handle.
    kind, guard = call(Guard.acquire, g, TTL, PERSISTENT)
    if kind != "ok":
        raise Failed(11, f"acquire: unexpected error {guard!r}")
    with guard:
        owner, token = guard.owner(), guard.fencing_token()
        kind, v = call(locks.lock, g, "o3", TTL, PERSISTENT)
        if not (
            kind == "err"
            and isinstance(v, Error_Busy)
            and v.value.owner == owner
            and v.value.fencing_token == token
        ):
            raise Failed(
                11, f"expected busy by {owner!r} token {token}, got {kind} {v!r}"
            )
        if not guard.is_held():
            raise Failed(11, "is_held() returned false")
    info = expect_ok(11, call(locks.get, g))
    if info is not None:
        raise Failed(11, f"expected free after dropping the guard, got {info!r}")
    grant = expect_ok(11, call(locks.lock, g, "o3", TTL, PERSISTENT))
    expect_ok(11, call(locks.unlock, g, "o3", grant.fencing_token))
    passed(11)

    # 12. Leave a persistent lock behind for the host to inspect.
    grant = expect_ok(12, call(locks.lock, held, "python", 60_000, PERSISTENT))
    say(f"held {grant.fencing_token}")
    passed(12)

    # 13. A lease owns two locks with its id as their owner and its expiry;
    # refresh moves both, revoke frees both, and a revoked lease locks
    # nothing. Leaving the `with` block drops the lease (already revoked).
    la, lb = f"{p}/lease/a", f"{p}/lease/b"
    kind, lease = call(Lease.grant, TTL, LEASE)
    if kind != "ok":
        raise Failed(13, f"grant: unexpected error {lease!r}")
    with lease:
        lease_id, expiry = lease.id(), lease.expires_at_ms()
        say(f"lease {lease_id}")
        if not (lease_id.startswith("lease-") and len(lease_id) == 6 + 32):
            raise Failed(13, f"lease id {lease_id!r}")
        tokens = {}
        for name in (la, lb):
            grant = expect_ok(13, call(lease.lock, name, 0))
            if grant.expires_at_ms != expiry:
                raise Failed(13, f"{name}: {grant!r}, lease expires at {expiry}")
            tokens[name] = grant.fencing_token
        # Locking again under the lease answers the same grant.
        again = expect_ok(13, call(lease.lock, la, 0))
        if (again.fencing_token, again.expires_at_ms) != (tokens[la], expiry):
            raise Failed(13, f"re-lock under the lease: {again!r}")
        for name in (la, lb):
            info = expect_ok(13, call(locks.get, name))
            if not (
                info is not None
                and info.owner == lease_id
                and info.fencing_token == tokens[name]
                and info.expires_at_ms == expiry
                and info.durability == Durability.PERSISTENT
            ):
                raise Failed(
                    13,
                    f"{name}: expected owner {lease_id!r} token {tokens[name]} "
                    f"expiry {expiry}, got {info!r}",
                )
        # Another owner is refused, and told the lease holds it.
        kind, v = call(locks.lock, la, "o4", TTL, PERSISTENT)
        if not (kind == "err" and isinstance(v, Error_Busy) and v.value.owner == lease_id):
            raise Failed(13, f"expected busy by {lease_id!r}, got {kind} {v!r}")
        if not lease.is_alive():
            raise Failed(13, "is_alive() false on a live lease")
        with lease.subscribe_lost() as lost:
            if lost.ready():
                raise Failed(13, "lost pollable ready on a live lease")

        time.sleep(0.02)
        refreshed = expect_ok(13, call(lease.refresh))
        if not (refreshed > expiry and lease.expires_at_ms() == refreshed):
            raise Failed(
                13,
                f"refresh answered {refreshed} (was {expiry}), "
                f"expires_at_ms() {lease.expires_at_ms()}",
            )
        for name in (la, lb):
            info = expect_ok(13, call(locks.get, name))
            if not (
                info is not None
                and info.owner == lease_id
                and info.fencing_token == tokens[name]
                and info.expires_at_ms == refreshed
            ):
                raise Failed(13, f"{name} after refresh to {refreshed}: {info!r}")

        expect_ok(13, call(lease.revoke))
        for name in (la, lb):
            info = expect_ok(13, call(locks.get, name))
            if info is not None:
                raise Failed(13, f"{name} held after revoke: {info!r}")
        if lease.is_alive():
            raise Failed(13, "is_alive() true after revoke")
        # Ready at once on lockd's host; composed with lockd-client on a
        # foreign host it is a zero-length timer, which wasmtime reports
        # ready from the second look on. Either way, promptly.
        with lease.subscribe_lost() as lost:
            if not ready_within(lost, 1.0):
                raise Failed(13, "lost pollable not ready within 1 s of the revoke")
        kind, v = call(lease.lock, la, 0)
        if not (kind == "err" and isinstance(v, Error_NotHeld)):
            raise Failed(13, f"lock under the revoked lease: expected not-held, got {kind} {v!r}")
        if expect_ok(13, call(locks.get, la)) is not None:
            raise Failed(13, f"{la} held after a lock under the revoked lease")
    passed(13)


class Run(exports.Run):
    def run(self) -> None:
        args = environment.get_arguments()
        if len(args) < 2:
            print("usage: python-conformance <lock-name-prefix>", file=sys.stderr)
            sys.stderr.flush()
            raise Err(None)
        try:
            scenario(args[1])
        except Failed as f:
            say(f"FAIL {f.step}: {f.detail}")
            raise Err(None)
        except Exception as e:  # a bug in this guest or in the bindings
            say(f"FAIL {current_step}: unexpected exception {e!r}")
            raise Err(None)
