// Helpers shared by the C guests of this directory (conformance.c,
// claims.c): step reporting, error rendering and strings for the
// wit-bindgen C bindings. Each guest is one translation unit, so everything
// here is static.
//
// Every line printed is flushed at once: the host allocates the strings and
// lists it returns through cabi_realloc, an export of this command module,
// which runs the module's destructors and so flushes stdio, and a write from
// inside cabi_realloc traps ("cannot leave component instance").

#ifndef LOCKD_C_GUEST_COMMON_H
#define LOCKD_C_GUEST_COMMON_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imports.h"

typedef lockd_lock_types_error_t lock_error_t;
typedef lockd_lock_types_grant_t grant_t;
typedef lockd_lock_locks_lock_options_t lock_options_t;

// The prefix of every name (argv[1]), set by main.
static const char *PREFIX;

static inline void passed(int step) {
    printf("ok %d\n", step);
    fflush(stdout);
}

// Prints `FAIL <step>: <detail>` and ends the program with status 1.
__attribute__((noreturn, format(printf, 2, 3))) static inline void fail(int step, const char *fmt,
                                                                        ...) {
    char detail[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    printf("FAIL %d: %s\n", step, detail);
    fflush(stdout);
    exit(1);
}

static inline const char *error_name(const lock_error_t *e) {
    switch (e->tag) {
    case LOCKD_LOCK_TYPES_ERROR_BUSY: return "busy";
    case LOCKD_LOCK_TYPES_ERROR_NOT_OWNER: return "not-owner";
    case LOCKD_LOCK_TYPES_ERROR_NOT_HELD: return "not-held";
    case LOCKD_LOCK_TYPES_ERROR_INVALID_ARGUMENT: return "invalid-argument";
    case LOCKD_LOCK_TYPES_ERROR_DENIED: return "denied";
    case LOCKD_LOCK_TYPES_ERROR_UNAVAILABLE: return "unavailable";
    default: return "unknown error tag";
    }
}

// Renders an error variant with its payload into buf.
static inline const char *describe(const lock_error_t *e, char *buf, size_t n) {
    const imports_string_t *msg = NULL;
    switch (e->tag) {
    case LOCKD_LOCK_TYPES_ERROR_BUSY:
        snprintf(buf, n, "busy(owner \"%.*s\", token %" PRIu64 ", expires %" PRIu64 ")",
                 (int)e->val.busy.owner.len, (const char *)e->val.busy.owner.ptr,
                 e->val.busy.fencing_token, e->val.busy.expires_at_ms);
        return buf;
    case LOCKD_LOCK_TYPES_ERROR_INVALID_ARGUMENT: msg = &e->val.invalid_argument; break;
    case LOCKD_LOCK_TYPES_ERROR_DENIED: msg = &e->val.denied; break;
    case LOCKD_LOCK_TYPES_ERROR_UNAVAILABLE: msg = &e->val.unavailable; break;
    default: break;
    }
    if (msg) {
        snprintf(buf, n, "%s(\"%.*s\")", error_name(e), (int)msg->len, (const char *)msg->ptr);
    } else {
        snprintf(buf, n, "%s", error_name(e));
    }
    return buf;
}

__attribute__((noreturn)) static inline void fail_err(int step, const char *what,
                                                      const lock_error_t *e) {
    char buf[768];
    fail(step, "%s: unexpected error %s", what, describe(e, buf, sizeof buf));
}

static inline imports_string_t str(const char *s) {
    imports_string_t r;
    imports_string_set(&r, s); // borrows s; nothing to free
    return r;
}

static inline bool str_eq(const imports_string_t *a, const imports_string_t *b) {
    return a->len == b->len && memcmp(a->ptr, b->ptr, a->len) == 0;
}

static inline bool str_eq_c(const imports_string_t *a, const char *b) {
    return a->len == strlen(b) && memcmp(a->ptr, b, a->len) == 0;
}

// `<PREFIX>/<suffix>`, allocated.
static inline char *name_of(const char *suffix) {
    size_t n = strlen(PREFIX) + 1 + strlen(suffix) + 1;
    char *s = malloc(n);
    if (!s) fail(0, "out of memory");
    snprintf(s, n, "%s/%s", PREFIX, suffix);
    return s;
}

// --- thin wrappers over the generated bindings ------------------------------

static inline bool do_lock(const char *name, const char *owner, uint32_t ttl, lock_options_t opts,
                           grant_t *grant, lock_error_t *err) {
    imports_string_t n = str(name), o = str(owner);
    return lockd_lock_locks_lock(&n, &o, ttl, &opts, grant, err);
}

static inline bool do_unlock(const char *name, const char *owner, const uint64_t *token,
                             lock_error_t *err) {
    imports_string_t n = str(name), o = str(owner);
    uint64_t t = token ? *token : 0;
    return lockd_lock_locks_unlock(&n, &o, token ? &t : NULL, err);
}

static inline bool do_extend(const char *name, const char *owner, uint32_t ttl, grant_t *grant,
                             lock_error_t *err) {
    imports_string_t n = str(name), o = str(owner);
    return lockd_lock_locks_extend(&n, &o, ttl, grant, err);
}

static inline bool do_get(const char *name, lockd_lock_locks_option_lock_info_t *info,
                          lock_error_t *err) {
    imports_string_t n = str(name);
    return lockd_lock_locks_get(&n, info, err);
}

// Locks or fails the step.
static inline grant_t must_lock(int step, const char *name, const char *owner, uint32_t ttl,
                                lock_options_t opts) {
    grant_t g;
    lock_error_t e;
    if (!do_lock(name, owner, ttl, opts, &g, &e)) fail_err(step, "lock", &e);
    return g;
}

static inline void must_unlock(int step, const char *name, const char *owner, uint64_t token) {
    lock_error_t e;
    if (!do_unlock(name, owner, &token, &e)) fail_err(step, "unlock", &e);
}

// Fails the step unless get(name) returns none.
static inline void must_be_free(int step, const char *name, const char *why) {
    lockd_lock_locks_option_lock_info_t info;
    lock_error_t e;
    if (!do_get(name, &info, &e)) fail_err(step, "get", &e);
    if (info.is_some) {
        fail(step, "%s: get returned owner \"%.*s\" token %" PRIu64, why, (int)info.val.owner.len,
             (const char *)info.val.owner.ptr, info.val.fencing_token);
    }
}

#endif
