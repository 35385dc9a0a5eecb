// The lockd:lock conformance scenario in C, as a wasi:cli command.
//
// Usage: `c-conformance <prefix>`. Every lock name starts with `<prefix>/`,
// so one host can run the scenario many times. For each step it prints
// `ok <step>`, or `FAIL <step>: <detail>` and exits 1 at once. It exits 0 only
// if every step passed, and leaves `<prefix>/held` locked by owner `c` for
// 60 s (printing `held <token>`), so the host can check that persistent state
// outlives the instance. Step 13 runs a lease: it prints `lease <id>` and
// leaves nothing of the lease held.
//
// Built by build.sh: bindings from `wit-bindgen c wit --world imports`, an
// ordinary `main` compiled with clang for wasm32-wasi (wasi-libc), and the
// wasi_snapshot_preview1 *command* adapter, which exports wasi:cli/run and
// turns `exit(1)` into an `err` result of run.
//
// Conventions of the wit-bindgen C bindings, as used below: a function whose
// WIT result is `result<T, error>` returns `true` on `ok` (filling `*ret`)
// and `false` on `err` (filling `*err`, a tagged union whose `tag` is one of
// the LOCKD_LOCK_TYPES_ERROR_* constants). Strings the host returns are
// allocated in guest memory and freed with the generated `*_free` functions.

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common.h"

#define TTL 10000u

static const lock_options_t PERSISTENT = {0, LOCKD_LOCK_TYPES_DURABILITY_PERSISTENT};
static const lock_options_t EPHEMERAL = {0, LOCKD_LOCK_TYPES_DURABILITY_EPHEMERAL};

// Fails the step unless get(name) shows owner `owner` (not NUL-terminated),
// token `token` and expiry `expiry`, persistent.
static void must_be_owned(int step, const char *name, const imports_string_t *owner,
                          uint64_t token, uint64_t expiry) {
    lockd_lock_locks_option_lock_info_t info;
    lock_error_t e;
    if (!do_get(name, &info, &e)) fail_err(step, "get", &e);
    if (!info.is_some) fail(step, "%s: expected held, get returned none", name);
    if (!(str_eq(&info.val.owner, owner) && info.val.fencing_token == token &&
          info.val.expires_at_ms == expiry &&
          info.val.durability == LOCKD_LOCK_TYPES_DURABILITY_PERSISTENT)) {
        fail(step,
             "%s: expected owner \"%.*s\" token %" PRIu64 " expiry %" PRIu64
             ", got owner \"%.*s\" token %" PRIu64 " expiry %" PRIu64 " durability %d",
             name, (int)owner->len, (const char *)owner->ptr, token, expiry,
             (int)info.val.owner.len, (const char *)info.val.owner.ptr, info.val.fencing_token,
             info.val.expires_at_ms, (int)info.val.durability);
    }
    lockd_lock_locks_option_lock_info_free(&info);
}

// Whether a fresh lost pollable of the lease is ready, looking `looks` times
// 10 ms apart.
static bool lost_ready(lockd_lock_leases_borrow_lease_t lease, int looks) {
    wasi_io_poll_own_pollable_t lost = lockd_lock_leases_method_lease_subscribe_lost(lease);
    wasi_io_poll_borrow_pollable_t borrowed = wasi_io_poll_borrow_pollable(lost);
    bool ready = wasi_io_poll_method_pollable_ready(borrowed);
    struct timespec pause = {0, 10 * 1000 * 1000};
    for (int i = 1; i < looks && !ready; i++) {
        nanosleep(&pause, NULL);
        ready = wasi_io_poll_method_pollable_ready(borrowed);
    }
    wasi_io_poll_pollable_drop_own(lost);
    return ready;
}

// --- the scenario -------------------------------------------------------------

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: c-conformance <lock-name-prefix>\n");
        return 2;
    }
    PREFIX = argv[1];
    char *a = name_of("a"), *b = name_of("b"), *g = name_of("g"), *held = name_of("held");
    grant_t grant;
    lock_error_t e;
    char buf[768];

    // 1. A free lock is granted.
    uint64_t t1 = must_lock(1, a, "o1", TTL, PERSISTENT).fencing_token;
    passed(1);

    // 2. Another owner gets `busy`, naming the holder and its token.
    if (do_lock(a, "o2", TTL, PERSISTENT, &grant, &e)) {
        fail(2, "expected busy, got a grant with token %" PRIu64, grant.fencing_token);
    }
    if (!(e.tag == LOCKD_LOCK_TYPES_ERROR_BUSY && str_eq_c(&e.val.busy.owner, "o1") &&
          e.val.busy.fencing_token == t1)) {
        fail(2, "expected busy by \"o1\" token %" PRIu64 ", got %s", t1, describe(&e, buf, sizeof buf));
    }
    lockd_lock_types_error_free(&e);
    passed(2);

    // 3. Re-locking by the holder is a retry: same token.
    grant = must_lock(3, a, "o1", TTL, PERSISTENT);
    if (grant.fencing_token != t1) {
        fail(3, "expected token %" PRIu64 ", got %" PRIu64, t1, grant.fencing_token);
    }
    uint64_t expiry3 = grant.expires_at_ms;
    passed(3);

    // 4. Only the holder may extend.
    if (do_extend(a, "o2", TTL, &grant, &e)) fail(4, "expected not-owner, got a grant");
    if (e.tag != LOCKD_LOCK_TYPES_ERROR_NOT_OWNER) {
        fail(4, "expected not-owner, got %s", describe(&e, buf, sizeof buf));
    }
    passed(4);

    // 5. Extending keeps the token and moves the expiry later.
    if (!do_extend(a, "o1", 20000, &grant, &e)) fail_err(5, "extend", &e);
    if (!(grant.fencing_token == t1 && grant.expires_at_ms > expiry3)) {
        fail(5, "expected token %" PRIu64 " and expiry > %" PRIu64 ", got token %" PRIu64 " expiry %" PRIu64,
             t1, expiry3, grant.fencing_token, grant.expires_at_ms);
    }
    passed(5);

    // 6. An unlock with a wrong token releases nothing.
    uint64_t wrong = t1 + 1; // unsigned: wraps like the other languages
    if (do_unlock(a, "o1", &wrong, &e)) fail(6, "expected not-owner, got ok");
    if (e.tag != LOCKD_LOCK_TYPES_ERROR_NOT_OWNER) {
        fail(6, "expected not-owner, got %s", describe(&e, buf, sizeof buf));
    }
    passed(6);

    // 7. An unlock with the right token releases the lock.
    must_unlock(7, a, "o1", t1);
    must_be_free(7, a, "expected none");
    passed(7);

    // 8. The next grant of the same name has a greater token.
    grant = must_lock(8, a, "o2", TTL, PERSISTENT);
    if (!(grant.fencing_token > t1)) {
        fail(8, "expected token > %" PRIu64 ", got %" PRIu64, t1, grant.fencing_token);
    }
    must_unlock(8, a, "o2", grant.fencing_token);
    passed(8);

    // 9. An ephemeral lease expires by itself, and the next token is greater.
    uint64_t tb = must_lock(9, b, "o1", 100, EPHEMERAL).fencing_token;
    struct timespec pause = {0, 300 * 1000 * 1000};
    nanosleep(&pause, NULL);
    must_be_free(9, b, "expected the lease to have expired");
    grant = must_lock(9, b, "o2", TTL, EPHEMERAL);
    if (!(grant.fencing_token > tb)) {
        fail(9, "expected token > %" PRIu64 ", got %" PRIu64, tb, grant.fencing_token);
    }
    must_unlock(9, b, "o2", grant.fencing_token); // leave P/b free, like P/a
    passed(9);

    // 10. Limits are enforced.
    char long_name[601];
    memset(long_name, 'n', 600);
    long_name[600] = '\0';
    struct {
        const char *what, *name;
        uint32_t ttl;
    } cases[] = {{"empty name", "", TTL}, {"600-byte name", long_name, TTL}, {"ttl 0", a, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (do_lock(cases[i].name, "o1", cases[i].ttl, PERSISTENT, &grant, &e)) {
            fail(10, "%s: expected invalid-argument, got a grant", cases[i].what);
        }
        if (e.tag != LOCKD_LOCK_TYPES_ERROR_INVALID_ARGUMENT) {
            fail(10, "%s: expected invalid-argument, got %s", cases[i].what, describe(&e, buf, sizeof buf));
        }
        lockd_lock_types_error_free(&e);
    }
    passed(10);

    // 11. A guard holds the lock under a host-generated owner and releases it
    // when its handle is dropped.
    lockd_lock_guards_own_guard_t guard;
    imports_string_t gname = str(g);
    lock_options_t gopts = PERSISTENT;
    if (!lockd_lock_guards_static_guard_acquire(&gname, TTL, &gopts, &guard, &e)) {
        fail_err(11, "acquire", &e);
    }
    lockd_lock_guards_borrow_guard_t gb = lockd_lock_guards_borrow_guard(guard);
    imports_string_t owner;
    lockd_lock_guards_method_guard_owner(gb, &owner);
    uint64_t gtoken = lockd_lock_guards_method_guard_fencing_token(gb);
    if (do_lock(g, "o3", TTL, PERSISTENT, &grant, &e)) fail(11, "expected busy, got a grant");
    if (!(e.tag == LOCKD_LOCK_TYPES_ERROR_BUSY && str_eq(&e.val.busy.owner, &owner) &&
          e.val.busy.fencing_token == gtoken)) {
        fail(11, "expected busy by \"%.*s\" token %" PRIu64 ", got %s", (int)owner.len,
             (const char *)owner.ptr, gtoken, describe(&e, buf, sizeof buf));
    }
    lockd_lock_types_error_free(&e);
    if (!lockd_lock_guards_method_guard_is_held(gb)) fail(11, "is-held returned false");
    imports_string_free(&owner);
    lockd_lock_guards_guard_drop_own(guard);
    must_be_free(11, g, "expected free after dropping the guard");
    grant = must_lock(11, g, "o3", TTL, PERSISTENT);
    must_unlock(11, g, "o3", grant.fencing_token);
    passed(11);

    // 12. Leave a persistent lock behind for the host to inspect.
    grant = must_lock(12, held, "c", 60000, PERSISTENT);
    printf("held %" PRIu64 "\n", grant.fencing_token);
    passed(12);

    // 13. A lease owns two locks with its id as their owner and its expiry;
    // refresh moves both, revoke frees both, and a revoked lease locks
    // nothing. Without keep-alive: the scenario refreshes the lease itself,
    // and a composed lockd-client on a foreign host answers keep-alive with
    // `denied`.
    char *lnames[2] = {name_of("lease/a"), name_of("lease/b")};
    lockd_lock_leases_lease_options_t lopts = {LOCKD_LOCK_TYPES_DURABILITY_PERSISTENT, false};
    lockd_lock_leases_own_lease_t lease;
    if (!lockd_lock_leases_static_lease_grant(TTL, &lopts, &lease, &e)) fail_err(13, "grant", &e);
    lockd_lock_leases_borrow_lease_t lb = lockd_lock_leases_borrow_lease(lease);
    imports_string_t lease_id;
    lockd_lock_leases_method_lease_id(lb, &lease_id);
    uint64_t lexpiry = lockd_lock_leases_method_lease_expires_at_ms(lb);
    printf("lease %.*s\n", (int)lease_id.len, (const char *)lease_id.ptr);
    // Flush before the next call that returns a string: the host allocates it
    // through cabi_realloc, an export of this command module, which runs the
    // module's destructors and so flushes stdio, and a write from inside
    // cabi_realloc traps ("cannot leave component instance").
    fflush(stdout);
    if (!(lease_id.len == 6 + 32 && memcmp(lease_id.ptr, "lease-", 6) == 0)) {
        fail(13, "lease id \"%.*s\"", (int)lease_id.len, (const char *)lease_id.ptr);
    }
    uint64_t ltokens[2];
    for (int i = 0; i < 2; i++) {
        imports_string_t n = str(lnames[i]);
        if (!lockd_lock_leases_method_lease_lock(lb, &n, 0, &grant, &e)) fail_err(13, "lock", &e);
        if (grant.expires_at_ms != lexpiry) {
            fail(13, "%s: expiry %" PRIu64 ", lease expires at %" PRIu64, lnames[i],
                 grant.expires_at_ms, lexpiry);
        }
        ltokens[i] = grant.fencing_token;
    }
    // Locking again under the lease answers the same grant.
    imports_string_t la = str(lnames[0]);
    if (!lockd_lock_leases_method_lease_lock(lb, &la, 0, &grant, &e)) fail_err(13, "re-lock", &e);
    if (!(grant.fencing_token == ltokens[0] && grant.expires_at_ms == lexpiry)) {
        fail(13, "re-lock under the lease: token %" PRIu64 " expiry %" PRIu64, grant.fencing_token,
             grant.expires_at_ms);
    }
    for (int i = 0; i < 2; i++) must_be_owned(13, lnames[i], &lease_id, ltokens[i], lexpiry);
    // Another owner is refused, and told the lease holds it.
    if (do_lock(lnames[0], "o4", TTL, PERSISTENT, &grant, &e)) fail(13, "expected busy, got a grant");
    if (!(e.tag == LOCKD_LOCK_TYPES_ERROR_BUSY && str_eq(&e.val.busy.owner, &lease_id))) {
        fail(13, "expected busy by the lease, got %s", describe(&e, buf, sizeof buf));
    }
    lockd_lock_types_error_free(&e);
    if (!lockd_lock_leases_method_lease_is_alive(lb)) fail(13, "is-alive false on a live lease");
    if (lost_ready(lb, 1)) fail(13, "lost pollable ready on a live lease");

    struct timespec tick = {0, 20 * 1000 * 1000};
    nanosleep(&tick, NULL);
    uint64_t refreshed;
    if (!lockd_lock_leases_method_lease_refresh(lb, &refreshed, &e)) fail_err(13, "refresh", &e);
    if (!(refreshed > lexpiry && lockd_lock_leases_method_lease_expires_at_ms(lb) == refreshed)) {
        fail(13, "refresh answered %" PRIu64 " (was %" PRIu64 "), expires-at-ms %" PRIu64, refreshed,
             lexpiry, lockd_lock_leases_method_lease_expires_at_ms(lb));
    }
    for (int i = 0; i < 2; i++) must_be_owned(13, lnames[i], &lease_id, ltokens[i], refreshed);

    if (!lockd_lock_leases_method_lease_revoke(lb, &e)) fail_err(13, "revoke", &e);
    for (int i = 0; i < 2; i++) must_be_free(13, lnames[i], "held after revoke");
    if (lockd_lock_leases_method_lease_is_alive(lb)) fail(13, "is-alive true after revoke");
    // Ready at once on lockd's host; composed with lockd-client on a foreign
    // host it is a zero-length timer, which wasmtime reports ready from the
    // second look on. Either way, promptly: within 100 looks (about 1 s).
    if (!lost_ready(lb, 100)) fail(13, "lost pollable not ready within 1 s of the revoke");
    if (lockd_lock_leases_method_lease_lock(lb, &la, 0, &grant, &e)) {
        fail(13, "lock under the revoked lease: expected not-held, got a grant");
    }
    if (e.tag != LOCKD_LOCK_TYPES_ERROR_NOT_HELD) {
        fail(13, "lock under the revoked lease: expected not-held, got %s",
             describe(&e, buf, sizeof buf));
    }
    lockd_lock_types_error_free(&e);
    must_be_free(13, lnames[0], "held after a lock under the revoked lease");
    imports_string_free(&lease_id);
    lockd_lock_leases_lease_drop_own(lease); // already revoked: nothing more happens
    passed(13);

    free(a);
    free(b);
    free(g);
    free(held);
    free(lnames[0]);
    free(lnames[1]);
    return 0;
}
