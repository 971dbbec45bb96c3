/* test_hooks.c — see test_hooks.h. */
#include "util/test_hooks.h"

#include <stdlib.h>
#include <string.h>

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

/* the hook variable is a list of numbers ("3,7") that holds n */
static int hook_lists(const char *name, long n) {
    const char *spec = getenv(name);
    for (const char *p = spec; p && *p;) {
        char *end;
        long s = strtol(p, &end, 10);
        if (end == p) break;
        if (s == n) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

int zt_test_hook_overflow_at(long step) { return hook_lists("ZEROTRAIN_INJECT_OVERFLOW", step); }

int zt_test_hook_clip_at(long step) { return hook_lists("ZEROTRAIN_INJECT_CLIP", step); }

int zt_test_hook_speculate(void) {
    const char *v = getenv("ZEROTRAIN_INJECT_SPECULATE");
    return !v || !*v ? -1 : !strcmp(v, "always") ? 1 : !strcmp(v, "never") ? 0 : -1;
}

int zt_test_hook_skip_rollback(void) {
    static int on = -1; /* read once: asked for every chunk of a step */
    if (on < 0) on = hook_on("ZEROTRAIN_INJECT_SKIP_ROLLBACK");
    return on;
}

int zt_test_hook_no_prealloc(void) { return hook_on("ZEROTRAIN_INJECT_NO_PREALLOC"); }

int zt_test_hook_nccl_hang_at(long seq) { return hook_is("ZEROTRAIN_INJECT_NCCL_HANG", seq); }

int zt_test_hook_skip_sync(void) { return hook_on("ZEROTRAIN_INJECT_SKIP_SYNC"); }

int zt_test_hook_extra_sync(void) { return hook_on("ZEROTRAIN_INJECT_EXTRA_SYNC"); }

int zt_test_hook_serial_lanes(void) { return hook_on("ZEROTRAIN_INJECT_SERIAL_LANES"); }
int zt_test_hook_launch_blocking(void) { return hook_on("ZEROTRAIN_INJECT_LAUNCH_BLOCKING"); }

int zt_test_hook_gather_comm_bytes(void) { return hook_on("ZEROTRAIN_INJECT_GATHER_COMM_BYTES"); }

int zt_test_hook_stop_in_finalize(int rank) { return hook_is("ZEROTRAIN_INJECT_STOP_IN_FINALIZE", rank); }

int zt_test_hook_stop_after_init(int rank) { return hook_is("ZEROTRAIN_INJECT_STOP_AFTER_INIT", rank); }

int zt_test_hook_tp_diverge(int tp_rank) { return hook_is("ZEROTRAIN_INJECT_TP_DIVERGE", tp_rank); }

const char *zt_test_hook_async_hold(long step) {
    const char *v = getenv("ZEROTRAIN_INJECT_ASYNC_HOLD");
    char *end;
    long s = v ? strtol(v, &end, 10) : -1;
    return v && end != v && *end == ':' && end[1] && s == step ? end + 1 : NULL;
}

int zt_test_hook_save_nan(int rank) { return hook_is("ZEROTRAIN_INJECT_SAVE_NAN", rank); }

int zt_test_hook_load_stall(int rank) {
    const char *v = getenv("ZEROTRAIN_INJECT_LOAD_STALL");
    if (v && !strncmp(v, "rank:", 5)) return strtol(v + 5, NULL, 10) == rank;
    return hook_on("ZEROTRAIN_INJECT_LOAD_STALL");
}

int zt_test_hook_blas_fallback(void) { return hook_on("ZEROTRAIN_INJECT_BLAS_FALLBACK"); }

int zt_test_hook_own_comm_order(void) { return hook_on("ZEROTRAIN_INJECT_OWN_COMM_ORDER"); }

int zt_test_hook_local_rank_from_env(void) { return hook_on("ZEROTRAIN_INJECT_LOCAL_RANK_FROM_ENV"); }

int zt_test_hook_nccl_version(int version) {
    const char *v = getenv("ZEROTRAIN_INJECT_NCCL_VERSION");
    return v && *v ? (int)strtol(v, NULL, 10) : version;
}

int zt_test_hook_no_dir_lock(void) { return hook_on("ZEROTRAIN_INJECT_NO_DIR_LOCK"); }

int zt_test_hook_lr_spike_at(long step) {
    static int fired; /* once: the steps a rollback repeats do not spike again */
    if (fired || !hook_is("ZEROTRAIN_INJECT_LR_SPIKE", step)) return 0;
    fired = 1;
    return 1;
}

long zt_test_hook_skip_batches_after(long step) {
    const char *v = getenv("ZEROTRAIN_INJECT_SKIP_BATCHES");
    char *end;
    if (!v || !*v || strtol(v, &end, 10) != step || *end != ':') return 0;
    return strtol(end + 1, NULL, 10);
}
