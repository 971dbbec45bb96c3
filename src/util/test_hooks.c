/* test_hooks.c — see test_hooks.h. */
#include "util/test_hooks.h"

#include <stdlib.h>

/* the hook variable is set to something other than "0" */
static int hook_on(const char *name) {
    const char *v = getenv(name);
    return v && *v && *v != '0';
}

/* the hook variable names this number (a rank, a sequence number) */
static int hook_is(const char *name, long n) {
    const char *v = getenv(name);
    return v && *v && strtol(v, NULL, 10) == n;
}

int zt_test_hook_overflow_at(long step) {
    const char *spec = getenv("ZEROTRAIN_INJECT_OVERFLOW");
    for (const char *p = spec; p && *p;) {
        char *end;
        long s = strtol(p, &end, 10);
        if (end == p) break;
        if (s == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

int zt_test_hook_no_prealloc(void) { return hook_on("ZEROTRAIN_INJECT_NO_PREALLOC"); }

int zt_test_hook_nccl_hang_at(long seq) { return hook_is("ZEROTRAIN_INJECT_NCCL_HANG", seq); }

int zt_test_hook_skip_sync(void) { return hook_on("ZEROTRAIN_INJECT_SKIP_SYNC"); }

int zt_test_hook_extra_sync(void) { return hook_on("ZEROTRAIN_INJECT_EXTRA_SYNC"); }

int zt_test_hook_stop_in_finalize(int rank) { return hook_is("ZEROTRAIN_INJECT_STOP_IN_FINALIZE", rank); }

int zt_test_hook_stop_after_init(int rank) { return hook_is("ZEROTRAIN_INJECT_STOP_AFTER_INIT", rank); }

int zt_test_hook_tp_diverge(int tp_rank) { return hook_is("ZEROTRAIN_INJECT_TP_DIVERGE", tp_rank); }
