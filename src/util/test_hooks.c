/* test_hooks.c — see test_hooks.h. */
#include "util/test_hooks.h"

#include <stdlib.h>

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

int zt_test_hook_no_prealloc(void) {
    const char *v = getenv("ZEROTRAIN_INJECT_NO_PREALLOC");
    return v && *v && *v != '0';
}

int zt_test_hook_nccl_hang_at(long seq) {
    const char *v = getenv("ZEROTRAIN_INJECT_NCCL_HANG");
    return v && *v && strtol(v, NULL, 10) == seq;
}

int zt_test_hook_skip_sync(void) {
    const char *v = getenv("ZEROTRAIN_INJECT_SKIP_SYNC");
    return v && *v && *v != '0';
}

int zt_test_hook_stop_in_finalize(int rank) {
    const char *v = getenv("ZEROTRAIN_INJECT_STOP_IN_FINALIZE");
    return v && *v && strtol(v, NULL, 10) == rank;
}

int zt_test_hook_stop_after_init(int rank) {
    const char *v = getenv("ZEROTRAIN_INJECT_STOP_AFTER_INIT");
    return v && *v && strtol(v, NULL, 10) == rank;
}

int zt_test_hook_tp_diverge(int tp_rank) {
    const char *v = getenv("ZEROTRAIN_INJECT_TP_DIVERGE");
    return v && *v && strtol(v, NULL, 10) == tp_rank;
}
