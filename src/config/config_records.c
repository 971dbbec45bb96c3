/* config_records.c — where each key of a load was set (the loader's records, config_schema.h) and
 * the errors placed there: what config.c records as it walks, and what the DeepSpeed rules
 * (config_deepspeed.c) and the cross-key checks (config_checks.c) blame. Below all three, so that
 * the checks config.c runs do not call back into config.c. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "config/config_schema.h"

/* index of the latest record of path, -1 if never set */
int zt_loader_rec_index(const zt_loader *L, const char *path) {
    for (int i = L->nrec - 1; i >= 0; i--)
        if (!strcmp(L->recs[i].path, path)) return i;
    return -1;
}

/* "WHERE: msg" at the latest of recs[0..n) that set path, else at the file (or "config") */
int zt_fail_at_rec(const zt_posrec *recs, int n, const char *source, const char *path, zt_err *err,
                   const char *msg) {
    for (int i = n - 1; i >= 0; i--)
        if (!strcmp(recs[i].path, path)) return zt_fail(err, "%s: %s", recs[i].where, msg);
    return zt_fail(err, "%s: %s: %s", source ? source : "config", path, msg);
}

/* Cross-key error at where `path` was last set. */
int zt_fail_rec(const zt_loader *L, const char *path, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return zt_fail_at_rec(L->recs, L->nrec, L->cfg->source_path, path, L->err, m);
}
