"""A WASI 0.3 command in Python on lockd:lock@0.2.0, for `lockd run`.

Usage: `python-p3 NAME`. `run` (WASI 0.3's `wasi:cli/run`, an `async func`)
runs two asyncio tasks at once: one awaits `locks.lock` of NAME (owner
`python`, TTL 60 s, waiting up to 30 s) and then unlocks it; the other ticks
every 20 ms on WASI 0.3's monotonic clock until the wait ends and notes the
longest time without a tick. It prints
`granted TOKEN after MS ms; TICKS ticks, longest gap GAP ms`, or
`FAIL NAME: ERROR` and exits 1.

Built with componentize-py (see build.sh), whose asyncio event loop runs the
tasks on the component model's own: while one task awaits the lock, the
other's `wait-for` calls end on time.
"""

import asyncio
import sys

from componentize_py_types import Err
from wit_world import exports
from wit_world.imports import environment, locks, monotonic_clock
from wit_world.imports.locks import LockOptions
from wit_world.imports.lockd_lock_types import Durability

TICK_NS = 20_000_000
WAITING = LockOptions(wait_ms=30_000, durability=Durability.EPHEMERAL)


class Run(exports.Run):
    async def run(self) -> None:
        args = environment.get_arguments()
        if len(args) != 2:
            print("usage: python-p3 NAME", file=sys.stderr)
            sys.exit(2)
        name = args[1]
        started = monotonic_clock.now()
        done = asyncio.Event()

        async def wait_for_lock() -> int:
            try:
                grant = await locks.lock(name, "python", 60_000, WAITING)
                await locks.unlock(name, "python", grant.fencing_token)
                return grant.fencing_token
            finally:
                done.set()

        async def ticker() -> tuple[int, int]:
            ticks, longest, last = 0, 0, started
            while not done.is_set():
                await monotonic_clock.wait_for(TICK_NS)
                now = monotonic_clock.now()
                longest, last, ticks = max(longest, now - last), now, ticks + 1
            return ticks, max(longest, monotonic_clock.now() - last)

        try:
            token, (ticks, longest) = await asyncio.gather(wait_for_lock(), ticker())
        except Err as e:
            print(f"FAIL {name}: {e.value}")
            sys.stdout.flush()
            sys.exit(1)
        elapsed_ms = (monotonic_clock.now() - started) // 1_000_000
        print(
            f"granted {token} after {elapsed_ms} ms; "
            f"{ticks} ticks, longest gap {longest // 1_000_000} ms"
        )
        sys.stdout.flush()
