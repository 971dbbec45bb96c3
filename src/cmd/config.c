/* config.c (the command) — `zerotrain config CONFIG [--ranks N] [--set KEY=VALUE]...`: loads and checks a
 * config exactly as `train` does before it touches data or memory (keys, types, ranges, cross-key
 * rules, the batch rule for N ranks, data_types against the backend that would run, and the checks
 * that need the model's sizes: config_sizes.h) and prints
 * the effective config; nothing is trained. Errors are train's, one line, exit status 1.
 * `zerotrain config --keys` prints the key reference from the key table. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "engine/init_from.h"
#include "cmd/help.h"
#include "config/config.h"
#include "engine/config_sizes.h"
#include "engine/session.h"


int zt_cmd_config(int argc, char **argv) {
    const char *path = NULL;
    long ranks = 1;
    char **sets = zt_xcalloc((size_t)argc + 1, sizeof *sets);
    int n_sets = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        char *end = NULL;
        if (!strcmp(a, "--keys")) { /* --keys --format md: docs/configuration.md's table */
            int md = v && !strcmp(v, "--format") && i + 2 < argc && !strcmp(argv[i + 2], "md");
            zt_config_print_keys(stdout, md);
            free(sets);
            return 0;
        }
        if (!strcmp(a, "--set") && v) sets[n_sets++] = argv[++i];
        else if (!strncmp(a, "--set=", 6)) sets[n_sets++] = argv[i] + 6;
        else if (!strcmp(a, "--ranks") && v && (ranks = strtol(v, &end, 10)) >= 1 && ranks <= ZT_MAX_RANKS && !*end) i++;
        else if (a[0] != '-' && !path) path = a;
        else {
            free(sets);
            return zt_help_bad_argument("config", a, v);
        }
    }
    if (!path) {
        free(sets);
        return zt_help_missing("config", "CONFIG");
    }
    zt_config cfg;
    zt_err err = {{0}};
    /* notes and the "auto" line go to stderr here, so that stdout is the effective config alone */
    fflush(stdout);
    int saved_stdout = dup(1);
    dup2(2, 1);
    int rc = zt_config_load(&cfg, path, sets, n_sets, &err);
    free(sets);
    const zt_backend *be = NULL;
    if (!rc) rc = zt_config_adopt_init_from(&cfg, &err);
    if (!rc) rc = zt_config_check_batch(&cfg, (int)ranks, &err);
    if (!rc) rc = (be = zt_pick_backend(&cfg, &err)) ? 0 : -1;
    if (!rc) {
        static const char *const dtype_names[] = {[ZT_F32] = "fp32", [ZT_BF16] = "bf16", [ZT_F16] = "fp16"};
        rc = zt_config_check_grad_accum(&cfg, be->name, dtype_names[be->compute_dtype], &err);
    }
    if (!rc) rc = zt_config_check_sizes(&cfg, (int)ranks, be, &err);
    fflush(stdout);
    dup2(saved_stdout, 1);
    close(saved_stdout);
    if (rc) {
        zt_print_error(&err);
        zt_config_free(&cfg); /* safe after a failed load, which freed it already */
        return 1;
    }
    fputs(cfg.effective_text, stdout);
    zt_config_free(&cfg);
    return 0;
}
