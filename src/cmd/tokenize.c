/* cmd_tokenize.c — `zerotrain tokenize`: text files -> llm.c token shards (GPT-2 BPE).
 *
 *   zerotrain tokenize [--vocab DIR] INPUT... -o PREFIX [--val-fraction F] [--shard-tokens N]
 *
 * Each INPUT is one document; documents are joined with <|endoftext|> (50256) BETWEEN them (none
 * before the first or after the last, so a single input's tokens are exactly its text's tokens —
 * tiny Shakespeare starts 5962, 22307, 25, 198). The first floor(F * total) tokens (default
 * F = 0.1; llm.c's tinyshakespeare split also takes val from the head) go to PREFIX_val.bin, the
 * rest to PREFIX_train_000000.bin, PREFIX_train_000001.bin, ... of at most N tokens each (default
 * 100M). Every shard is written atomically (temp file + rename); when one fails, the shards this
 * run already wrote are removed again. No MPI: runs on one process. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "util/util.h"

static const char USAGE[] =
    "usage: zerotrain tokenize [--vocab DIR] INPUT... -o PREFIX [--val-fraction F] [--shard-tokens N]\n"
    "  --vocab DIR         GPT-2 vocabulary folder with encoder.json and vocab.bpe (default data/gpt2)\n"
    "  -o PREFIX           writes PREFIX_val.bin and PREFIX_train_000000.bin, ...\n"
    "  --val-fraction F    fraction of the tokens, taken from the head, for validation (default 0.1; 0 = none)\n"
    "  --shard-tokens N    at most N tokens per train shard (default 100000000)\n"
    "Several inputs are separate documents, joined by <|endoftext|> (id 50256).\n";

static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "zerotrain: error: tokenize: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n%s", USAGE);
    return 2;
}

typedef struct u16vec {
    uint16_t *data;
    size_t n, cap;
} u16vec;

static void u16_reserve(u16vec *v, size_t extra) {
    if (v->n + extra <= v->cap) return;
    size_t cap = v->cap ? v->cap : 1 << 20;
    while (cap < v->n + extra) cap *= 2;
    v->data = zt_xrealloc(v->data, cap * sizeof *v->data);
    v->cap = cap;
}

static char *shard_name(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *s = zt_xmalloc(n);
    snprintf(s, n, "%s%s", prefix, suffix);
    return s;
}

int zt_cmd_tokenize(int argc, char **argv) {
    const char *vocab = "data/gpt2", *prefix = NULL;
    double val_fraction = 0.1;
    long long shard_tokens = 100000000;
    const char **inputs = zt_xcalloc((size_t)argc + 1, sizeof *inputs);
    int n_inputs = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const char *opts[] = {"--vocab", "-o", "--output", "--val-fraction", "--shard-tokens"};
        int opt = -1;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(USAGE, stdout);
            free(inputs);
            return 0;
        }
        for (int k = 0; k < 5; k++) {
            size_t l = strlen(opts[k]);
            if (!strcmp(a, opts[k])) {
                if (i + 1 >= argc) { free(inputs); return usage_error("%s needs a value", a); }
                opt = k;
                val = argv[++i];
            } else if (!strncmp(a, opts[k], l) && a[l] == '=' && k != 1) {
                opt = k;
                val = a + l + 1;
            }
        }
        if (opt < 0) {
            if (a[0] == '-' && a[1]) { free(inputs); return usage_error("unknown option %s", a); }
            inputs[n_inputs++] = a;
            continue;
        }
        char *end;
        switch (opt) {
        case 0: vocab = val; break;
        case 1:
        case 2: prefix = val; break;
        case 3:
            errno = 0;
            val_fraction = strtod(val, &end);
            if (errno || end == val || *end || !(val_fraction >= 0 && val_fraction < 1)) {
                free(inputs);
                return usage_error("--val-fraction must be a number in [0, 1), not '%s'", val);
            }
            break;
        case 4:
            errno = 0;
            shard_tokens = strtoll(val, &end, 10);
            if (errno || end == val || *end || shard_tokens < 1 || shard_tokens > INT32_MAX) {
                free(inputs);
                return usage_error("--shard-tokens must be an integer in [1, 2147483647], not '%s'", val);
            }
            break;
        }
    }
    if (n_inputs == 0) { free(inputs); return usage_error("%sno input files", ""); }
    if (!prefix || !*prefix) { free(inputs); return usage_error("%s-o PREFIX is required", ""); }

    zt_err err;
    zt_tokenizer *tok = zt_tokenizer_load(vocab, &err);
    u16vec all = {0};
    zt_ids ids = {0};
    char **written = zt_xcalloc(8, sizeof *written);
    size_t n_written = 0, cap_written = 8;
    if (!tok) goto fail;

    /* fail before the work when the output folder cannot take files */
    {
        const char *slash = strrchr(prefix, '/');
        char *dir = slash ? strndup(prefix, slash == prefix ? 1 : (size_t)(slash - prefix)) : strdup(".");
        struct stat st;
        int ok = dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode) && access(dir, W_OK | X_OK) == 0;
        int e = errno;
        if (!ok) {
            char *name = shard_name(prefix, "_val.bin");
            zt_fail(&err, "%s: cannot write (folder %s: %s)", name, dir ? dir : "?",
                    dir && stat(dir, &st) == 0 && !S_ISDIR(st.st_mode) ? "not a folder" : strerror(e));
            free(name);
        }
        free(dir);
        if (!ok) goto fail;
    }

    double t0 = zt_now();
    size_t total_bytes = 0;
    for (int i = 0; i < n_inputs; i++) {
        size_t len;
        char *text = zt_read_file(inputs[i], &len, &err);
        if (!text) goto fail;
        ids.n = 0;
        if (zt_tokenizer_encode(tok, text, len, &ids, &err)) {
            free(text);
            goto fail;
        }
        free(text);
        total_bytes += len;
        u16_reserve(&all, ids.n + 1);
        if (i > 0) all.data[all.n++] = ZT_TOKEN_EOT;
        for (size_t k = 0; k < ids.n; k++) all.data[all.n++] = (uint16_t)ids.data[k];
    }
    double dt = zt_now() - t0;
    zt_ids_free(&ids);
    if (dt < 1e-9) dt = 1e-9;
    zt_info("tokenize: %zu bytes -> %zu tokens in %.2f s (%.1f MB/s, %.0f tokens/s)", total_bytes, all.n, dt,
            total_bytes / dt / 1e6, all.n / dt);

    size_t n_val = (size_t)(val_fraction * (double)all.n);
    if (n_val >= all.n) n_val = all.n;
    size_t n_train = all.n - n_val;
    if (n_train == 0) {
        zt_fail(&err, "tokenize: no tokens for training (%zu tokens in all, %zu for validation)", all.n, n_val);
        goto fail;
    }
    if (n_val > 0) {
        char *name = shard_name(prefix, "_val.bin");
        if (zt_shard_write(name, all.data, n_val, &err)) { free(name); goto fail; }
        written[n_written++] = name;
    } else if (val_fraction > 0) {
        zt_warn("tokenize: --val-fraction %g of %zu tokens is no token; no %s_val.bin written", val_fraction, all.n, prefix);
    }
    size_t n_shards = (n_train + (size_t)shard_tokens - 1) / (size_t)shard_tokens;
    for (size_t s = 0; s < n_shards; s++) {
        char suffix[48];
        snprintf(suffix, sizeof suffix, "_train_%06zu.bin", s);
        char *name = shard_name(prefix, suffix);
        size_t start = n_val + s * (size_t)shard_tokens;
        size_t n = all.n - start < (size_t)shard_tokens ? all.n - start : (size_t)shard_tokens;
        if (zt_shard_write(name, all.data + start, n, &err)) { free(name); goto fail; }
        if (n_written == cap_written) {
            cap_written *= 2;
            written = zt_xrealloc(written, cap_written * sizeof *written);
        }
        written[n_written++] = name;
    }
    for (size_t k = 0; k < n_written; k++) {
        size_t n;
        zt_shard_read_header(written[k], &n, NULL);
        zt_info("  wrote %s (%zu tokens)", written[k], n);
    }
    for (size_t s = n_shards;; s++) { /* shards a longer earlier run left behind would join a glob */
        char suffix[48];
        snprintf(suffix, sizeof suffix, "_train_%06zu.bin", s);
        char *name = shard_name(prefix, suffix);
        int exists = access(name, F_OK) == 0;
        if (exists) zt_warn("tokenize: %s is from an earlier run, not this one (remove it before training on %s_train_*.bin)", name, prefix);
        free(name);
        if (!exists) break;
    }
    rc = 0;
    goto done;
fail:
    zt_print_error(&err);
    for (size_t k = 0; k < n_written; k++) unlink(written[k]); /* no half-finished set of shards */
done:
    for (size_t k = 0; k < n_written; k++) free(written[k]);
    free(written);
    free(all.data);
    zt_ids_free(&ids);
    zt_tokenizer_free(tok);
    free(inputs);
    return rc;
}
