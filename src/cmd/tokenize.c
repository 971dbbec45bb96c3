/* cmd_tokenize.c — `zerotrain tokenize`: text files -> llm.c token shards (byte-level BPE: GPT-2 or a tokenizer.json).
 *
 *   zerotrain tokenize [--vocab PATH] INPUT... -o PREFIX [--val-fraction F] [--shard-tokens N] [-j N]
 *
 * --vocab is a GPT-2 vocabulary folder or a Hugging Face tokenizer.json (or a folder with one; see
 * io/tokenizer.h). Each INPUT is one document; documents are joined with <|endoftext|> (50256 in
 * GPT-2's; a tokenizer.json's <|endoftext|>, <|end_of_text|> or </s>) BETWEEN them (none
 * before the first or after the last, so a single input's tokens are exactly its text's tokens —
 * tiny Shakespeare starts 5962, 22307, 25, 198). The first floor(F * total) tokens (default
 * F = 0.1; llm.c's tinyshakespeare split also takes val from the head) go to PREFIX_val.bin, the
 * rest to PREFIX_train_000000.bin, PREFIX_train_000001.bin, ... of exactly N tokens each but the
 * last (default 100M); a shard boundary falls wherever the count says, inside a document or not.
 * Shards hold uint16 ids; a vocabulary over 65536 tokens (Llama 3's, Qwen2's) gets uint32 ones,
 * llm.c's Llama 3 format (shard.h), which training and eval read alike.
 * Every shard is written atomically (temp file + rename); when one fails, the shards this run
 * already wrote are removed again. No MPI: runs on one process.
 *
 * Streaming, in bounded memory: the inputs are read block by block (1 MiB; the test-only
 * environment variable ZEROTRAIN_TOKENIZE_BLOCK sets it in bytes), each block cut where
 * zt_tokenizer_last_cut says encoding its parts alone gives the ids of the whole (a block grows
 * while it holds no such cut: a single run of letters, digits or spaces), and encoded by a pool of
 * -j threads (default: the cores this process may run on), one zt_encoder each; one writer thread
 * takes the blocks' ids in input order. With --val-fraction 0 the ids go straight into the train
 * shards, each committed as it fills. Otherwise the split needs the total, known only at the end:
 * the ids go to a spool (2 bytes a token, 4 with uint32 shards, an unlinked file in PREFIX's folder, so nothing is left
 * behind even by a kill), which at the end is cut into PREFIX_val.bin and the train shards, the
 * spool's disk space freed as it is read. Memory: (threads + 2) blocks of text and their ids, an
 * encoder's piece cache (about 3.5 MiB) a thread, and the vocabulary. Inputs are read as streams
 * (pipes and process substitution work the same; a pipe nobody writes to ends after
 * ZEROTRAIN_PIPE_TIMEOUT seconds, as zt_read_file does). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmd/commands.h"
#include "cmd/help.h"
#include "cmd/sample.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "util/util.h"

#define DEFAULT_BLOCK_BYTES (1u << 20)
#define COPY_TOKENS (1u << 20) /* tokens per read of the spool, and per staging of ids */

/* a usage error: one line, then the synopsis (cmd/help.c's, as every command's) */
static int usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "zerotrain: error: tokenize: ");
    fprintf(stderr, fmt, arg);
    fputc('\n', stderr);
    zt_help_usage(stderr, "tokenize");
    return 2;
}

static char *shard_name(const char *prefix, const char *suffix) {
    size_t n = strlen(prefix) + strlen(suffix) + 1;
    char *s = zt_xmalloc(n);
    snprintf(s, n, "%s%s", prefix, suffix);
    return s;
}

/* ---------------------------------------------------------------- the output: shards (and the spool) */

typedef struct sink {
    const char *prefix;
    size_t shard_tokens;
    int spooled;          /* ids go to the spool first (a validation split) */
    int spool_fd;
    zt_shard_writer shard; /* the train shard being filled, when shard_open */
    int shard_open;
    size_t n_shards, total;
    int eot;              /* the id that joins documents */
    int width;            /* bytes a token in the shards: 2 (uint16), 4 (a vocabulary over 65536) */
    uint8_t *stage;       /* COPY_TOKENS tokens as the shards hold them (little-endian, width bytes) */
    char **written;
    size_t n_written, cap_written;
} sink;

static void sink_record(sink *k, const char *path) {
    if (k->n_written == k->cap_written) {
        k->cap_written = k->cap_written ? 2 * k->cap_written : 8;
        k->written = zt_xrealloc(k->written, k->cap_written * sizeof *k->written);
    }
    k->written[k->n_written++] = zt_xstrdup(path);
}

static int commit_shard(sink *k, zt_shard_writer *w, zt_err *err) {
    char *path = zt_xstrdup(w->path);
    int rc = zt_shard_writer_commit(w, err);
    if (rc == 0) sink_record(k, path);
    free(path);
    return rc;
}

/* Appends to the train shards: PREFIX_train_%06zu.bin, each committed when it holds shard_tokens. */
static int fill_train(sink *k, const uint8_t *t, size_t n, zt_err *err) {
    while (n) {
        if (!k->shard_open) {
            char suffix[48];
            snprintf(suffix, sizeof suffix, "_train_%06zu.bin", k->n_shards);
            char *name = shard_name(k->prefix, suffix);
            int rc = zt_shard_writer_open(&k->shard, name, k->width, err);
            free(name);
            if (rc) return -1;
            k->shard_open = 1;
            k->n_shards++;
        }
        size_t room = k->shard_tokens - k->shard.n, m = n < room ? n : room;
        if (zt_shard_writer_append_le(&k->shard, t, m, err)) { k->shard_open = 0; return -1; }
        t += m * (size_t)k->width;
        n -= m;
        if (k->shard.n == k->shard_tokens) {
            k->shard_open = 0;
            if (commit_shard(k, &k->shard, err)) return -1;
        }
    }
    return 0;
}

static int write_all_fd(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* IDS[0..N) into STAGE from token AT on: little-endian, WIDTH bytes each, as the shards hold them. */
static void stage_ids(uint8_t *stage, int width, size_t at, const int *ids, size_t n) {
    uint8_t *b = stage + at * (size_t)width;
    if (width == 2) {
        for (size_t i = 0; i < n; i++, b += 2) b[0] = (uint8_t)ids[i], b[1] = (uint8_t)(ids[i] >> 8);
    } else {
        for (size_t i = 0; i < n; i++, b += 4)
            b[0] = (uint8_t)ids[i], b[1] = (uint8_t)(ids[i] >> 8), b[2] = (uint8_t)(ids[i] >> 16), b[3] = (uint8_t)(ids[i] >> 24);
    }
}

/* One block's ids, in input order. */
static int sink_put(sink *k, const int *ids, size_t n, int eot_first, zt_err *err) {
    for (size_t i = 0; i < n || eot_first;) {
        size_t m = 0;
        if (eot_first) { stage_ids(k->stage, k->width, m++, &k->eot, 1); eot_first = 0; }
        size_t take = n - i < COPY_TOKENS - m ? n - i : COPY_TOKENS - m;
        stage_ids(k->stage, k->width, m, ids + i, take);
        m += take, i += take;
        k->total += m;
        if (!k->spooled) {
            if (fill_train(k, k->stage, m, err)) return -1;
        } else {
            if (write_all_fd(k->spool_fd, k->stage, m * (size_t)k->width))
                return zt_fail(err, "%s_val.bin: cannot spool the tokens in its folder (%s)", k->prefix, strerror(errno));
        }
    }
    return 0;
}

/* Reads the spool's tokens [from, from + n) into fill (val or train), freeing its disk space. */
static int replay(sink *k, size_t from, size_t n, zt_shard_writer *val, zt_err *err) {
    for (size_t done = 0; done < n;) {
        size_t m = n - done < COPY_TOKENS ? n - done : COPY_TOKENS;
        size_t w = (size_t)k->width, got = 0;
        off_t off = (off_t)(w * (from + done));
        while (got < w * m) {
            ssize_t r = pread(k->spool_fd, (char *)k->stage + got, w * m - got, off + (off_t)got);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) return zt_fail(err, "%s_val.bin: cannot read the token spool back (%s)", k->prefix, r ? strerror(errno) : "short");
            got += (size_t)r;
        }
        fallocate(k->spool_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)(w * m)); /* best effort */
        if (val ? zt_shard_writer_append_le(val, k->stage, m, err) : fill_train(k, k->stage, m, err)) return -1;
        done += m;
    }
    return 0;
}

/* The end of the input: the spool (if any) cut into val and train, the last train shard committed. */
static int sink_finish(sink *k, double val_fraction, zt_err *err) {
    size_t n_val = k->spooled ? (size_t)(val_fraction * (double)k->total) : 0;
    if (n_val >= k->total) n_val = k->total;
    if (k->total - n_val == 0)
        return zt_fail(err, "tokenize: no tokens for training (%zu tokens in all, %zu for validation)", k->total, n_val);
    if (n_val > 0) {
        char *name = shard_name(k->prefix, "_val.bin");
        zt_shard_writer val;
        int rc = zt_shard_writer_open(&val, name, k->width, err);
        free(name);
        if (rc) return -1;
        if (replay(k, 0, n_val, &val, err)) { zt_shard_writer_abort(&val); return -1; }
        if (commit_shard(k, &val, err)) return -1;
    } else if (val_fraction > 0) {
        zt_warn("tokenize: --val-fraction %g of %zu tokens is no token; no %s_val.bin written", val_fraction, k->total, k->prefix);
    }
    if (k->spooled && replay(k, n_val, k->total - n_val, NULL, err)) return -1;
    if (k->shard_open) {
        k->shard_open = 0;
        if (commit_shard(k, &k->shard, err)) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the pipeline: read, encode, write */

typedef struct block {
    char *text;
    size_t len, cap;
    int eot_first; /* the first block of a document after the first: <|endoftext|> goes before it */
    int done;      /* encoded: ids ready for the writer */
    zt_ids ids;
} block;

typedef struct pipeline {
    const zt_tokenizer *tok;
    sink *out;
    block *ring;
    size_t n_slots;
    pthread_mutex_t mu;
    pthread_cond_t cv;              /* any change below */
    size_t filled, taken, written;  /* blocks read, taken by an encoder, written, in input order */
    int end, failed;                /* end: every block is read; failed: err holds why, all stop */
    zt_err err;
    size_t bytes;                   /* input bytes read */
} pipeline;

static void fail_locked(pipeline *p, const zt_err *e) {
    if (!p->failed) p->err = *e;
    p->failed = 1;
    pthread_cond_broadcast(&p->cv);
}

static void *encode_main(void *arg) {
    pipeline *p = arg;
    zt_encoder *enc = zt_encoder_new(p->tok);
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (!p->failed && p->taken == p->filled && !p->end) pthread_cond_wait(&p->cv, &p->mu);
        if (p->failed || p->taken == p->filled) break;
        block *b = &p->ring[p->taken++ % p->n_slots];
        pthread_mutex_unlock(&p->mu);
        zt_err e;
        b->ids.n = 0;
        int rc = zt_encoder_encode(enc, b->text, b->len, &b->ids, &e);
        pthread_mutex_lock(&p->mu);
        if (rc) fail_locked(p, &e);
        b->done = 1;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    zt_encoder_free(enc);
    return NULL;
}

static void *write_main(void *arg) {
    pipeline *p = arg;
    pthread_mutex_lock(&p->mu);
    for (;;) {
        block *b = &p->ring[p->written % p->n_slots];
        while (!p->failed && !(p->written < p->filled && b->done) && !(p->end && p->written == p->filled))
            pthread_cond_wait(&p->cv, &p->mu);
        if (p->failed || p->written == p->filled) break;
        pthread_mutex_unlock(&p->mu);
        zt_err e;
        int rc = sink_put(p->out, b->ids.data, b->ids.n, b->eot_first, &e);
        pthread_mutex_lock(&p->mu);
        if (rc) fail_locked(p, &e);
        b->done = 0;
        p->written++;
        pthread_cond_broadcast(&p->cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static void block_reserve(block *b, size_t need) {
    if (need <= b->cap) return;
    b->cap = need > 2 * b->cap ? need : 2 * b->cap;
    b->text = zt_xrealloc(b->text, b->cap);
}

/* Reads the inputs into blocks (this thread), handing each to the encoders. 0, or -1 with p->err. */
static int read_inputs(pipeline *p, const char **inputs, int n_inputs, size_t block_bytes) {
    char *carry = NULL; /* the text after the last cut, which starts the next block */
    size_t carry_n = 0, carry_cap = 0;
    int rc = 0;
    for (int d = 0; d < n_inputs && rc == 0; d++) {
        zt_reader r;
        zt_err e;
        if (zt_reader_open(&r, inputs[d], &e)) {
            pthread_mutex_lock(&p->mu);
            fail_locked(p, &e);
            pthread_mutex_unlock(&p->mu);
            rc = -1;
            break;
        }
        int at_end = 0, first = 1;
        carry_n = 0;
        while (!at_end || first) {
            pthread_mutex_lock(&p->mu);
            while (!p->failed && p->filled - p->written == p->n_slots) pthread_cond_wait(&p->cv, &p->mu);
            int failed = p->failed;
            pthread_mutex_unlock(&p->mu);
            if (failed) { rc = -1; break; }
            block *b = &p->ring[p->filled % p->n_slots];
            block_reserve(b, carry_n + block_bytes);
            memcpy(b->text, carry, carry_n);
            b->len = carry_n;
            b->eot_first = d > 0 && first;
            first = 0;
            size_t cut = 0, searched = 0;
            while (!at_end && !cut) { /* read a block's worth more until there is a cut, or the end */
                size_t want = b->len + block_bytes;
                block_reserve(b, want);
                while (b->len < want) {
                    long got = zt_reader_read(&r, b->text + b->len, want - b->len, &e);
                    if (got < 0) {
                        pthread_mutex_lock(&p->mu);
                        fail_locked(p, &e);
                        pthread_mutex_unlock(&p->mu);
                        rc = -1;
                        break;
                    }
                    if (got == 0) { at_end = 1; break; }
                    b->len += (size_t)got;
                    p->bytes += (size_t)got; /* only this thread reads it before the joins */
                }
                if (rc) break;
                if (!at_end) {
                    cut = zt_tokenizer_last_cut(p->tok, b->text, searched, b->len);
                    size_t reach = zt_tokenizer_cut_reach(p->tok); /* cuts up to len - reach are decided */
                    searched = b->len >= reach - 1 ? b->len - (reach - 1) : 0;
                }
            }
            if (rc) break;
            if (cut) {
                carry_n = b->len - cut;
                if (carry_n > carry_cap) {
                    carry_cap = carry_n > 2 * carry_cap ? carry_n : 2 * carry_cap;
                    carry = zt_xrealloc(carry, carry_cap);
                }
                memcpy(carry, b->text + cut, carry_n);
                b->len = cut;
            }
            pthread_mutex_lock(&p->mu);
            p->filled++;
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
        }
        zt_reader_close(&r);
    }
    free(carry);
    pthread_mutex_lock(&p->mu);
    p->end = 1;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    return rc;
}

/* The cores this process may run on (its affinity mask; the online cores when that fails). */
static int usable_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* Tokenizes INPUTS into the sink's shards with THREADS encoders. 0, or -1 with ERR. */
static int tokenize_stream(const zt_tokenizer *tok, const char **inputs, int n_inputs, int threads, sink *out,
                           size_t *bytes_read, zt_err *err) {
    const char *env = getenv("ZEROTRAIN_TOKENIZE_BLOCK"); /* test-only: tiny blocks put cuts everywhere */
    size_t block_bytes = env && atoll(env) > 0 ? (size_t)atoll(env) : DEFAULT_BLOCK_BYTES;
    pipeline p = {.tok = tok, .out = out, .n_slots = (size_t)threads + 2};
    p.ring = zt_xcalloc(p.n_slots, sizeof *p.ring);
    pthread_mutex_init(&p.mu, NULL);
    pthread_cond_init(&p.cv, NULL);
    pthread_t *workers = zt_xcalloc((size_t)threads, sizeof *workers), writer;
    int n_started = 0, writer_started = pthread_create(&writer, NULL, write_main, &p) == 0;
    while (writer_started && n_started < threads && pthread_create(&workers[n_started], NULL, encode_main, &p) == 0) n_started++;
    if (!writer_started || n_started == 0) {
        zt_err e;
        zt_fail(&e, "tokenize: cannot start threads (%s)", strerror(errno));
        pthread_mutex_lock(&p.mu);
        fail_locked(&p, &e);
        p.end = 1;
        pthread_mutex_unlock(&p.mu);
    }
    if (!p.failed) read_inputs(&p, inputs, n_inputs, block_bytes);
    for (int i = 0; i < n_started; i++) pthread_join(workers[i], NULL);
    if (writer_started) pthread_join(writer, NULL);
    *bytes_read = p.bytes;
    for (size_t i = 0; i < p.n_slots; i++) {
        free(p.ring[i].text);
        zt_ids_free(&p.ring[i].ids);
    }
    free(p.ring);
    free(workers);
    pthread_mutex_destroy(&p.mu);
    pthread_cond_destroy(&p.cv);
    if (p.failed) *err = p.err;
    return p.failed ? -1 : 0;
}

int zt_cmd_tokenize(int argc, char **argv) {
    const char *vocab = zt_default_vocab_dir(), *prefix = NULL; /* the lookup sample and export use */
    double val_fraction = 0.1;
    long long shard_tokens = 100000000;
    int threads = usable_cores();
    const char **inputs = zt_xcalloc((size_t)argc + 1, sizeof *inputs);
    int n_inputs = 0, rc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const char *opts[] = {"--vocab", "-o", "--output", "--val-fraction", "--shard-tokens", "-j", "--threads"};
        int opt = -1;
        for (int k = 0; k < 7; k++) {
            size_t l = strlen(opts[k]);
            if (!strcmp(a, opts[k])) {
                if (i + 1 >= argc) { free(inputs); return zt_help_bad_argument("tokenize", a, NULL); }
                opt = k;
                val = argv[++i];
            } else if (!strncmp(a, opts[k], l) && a[l] == '=' && k != 1 && k != 5) {
                opt = k;
                val = a + l + 1;
            }
        }
        if (opt < 0) {
            if (a[0] == '-' && a[1]) { free(inputs); return zt_help_bad_argument("tokenize", a, NULL); }
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
        case 5:
        case 6: {
            errno = 0;
            long j = strtol(val, &end, 10);
            if (errno || end == val || *end || j < 1 || j > 1024) {
                free(inputs);
                return usage_error("-j must be an integer in [1, 1024], not '%s'", val);
            }
            threads = (int)j;
            break;
        }
        }
    }
    if (n_inputs == 0) { free(inputs); return usage_error("%sno input files", ""); }
    if (!prefix || !*prefix) { free(inputs); return usage_error("%s-o PREFIX is required", ""); }

    zt_err err;
    zt_tokenizer *tok = zt_tokenizer_load(vocab, &err);
    sink out = {.prefix = prefix, .shard_tokens = (size_t)shard_tokens, .spooled = val_fraction > 0, .spool_fd = -1};
    if (!tok) goto fail;
    out.eot = zt_tokenizer_eot(tok);
    out.width = zt_tokenizer_vocab_size(tok) > 65536 ? 4 : 2;
    if (out.eot < 0 && n_inputs > 1) {
        zt_fail(&err, "%s: no <|endoftext|>, <|end_of_text|> or </s> special token to join %d inputs with (give one input)",
                vocab, n_inputs);
        goto fail;
    }

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
    if (out.spooled) { /* unlinked at once: the spool never outlives this process */
        char suffix[48];
        snprintf(suffix, sizeof suffix, ".tokenize_spool.tmp.%ld", (long)getpid());
        char *name = shard_name(prefix, suffix);
        out.spool_fd = open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (out.spool_fd < 0) zt_fail(&err, "%s: cannot write (creating the token spool %s: %s)", prefix, name, strerror(errno));
        else unlink(name);
        free(name);
        if (out.spool_fd < 0) goto fail;
    }
    out.stage = zt_xmalloc(COPY_TOKENS * (size_t)out.width);

    double t0 = zt_now();
    size_t total_bytes = 0;
    if (tokenize_stream(tok, inputs, n_inputs, threads, &out, &total_bytes, &err)) goto fail;
    double dt = zt_now() - t0;
    if (dt < 1e-9) dt = 1e-9;
    zt_info("tokenize: %zu bytes -> %zu tokens in %.2f s (%.1f MB/s, %.0f tokens/s, %d threads)", total_bytes, out.total, dt,
            total_bytes / dt / 1e6, out.total / dt, threads);
    if (sink_finish(&out, val_fraction, &err)) goto fail;
    for (size_t k = 0; k < out.n_written; k++) {
        size_t n;
        zt_shard_read_header(out.written[k], &n, NULL, NULL);
        zt_info("  wrote %s (%zu tokens)", out.written[k], n);
    }
    for (size_t s = out.n_shards;; s++) { /* shards a longer earlier run left behind would join a glob */
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
    if (out.shard_open) zt_shard_writer_abort(&out.shard);
    for (size_t k = 0; k < out.n_written; k++) unlink(out.written[k]); /* no half-finished set of shards */
done:
    if (out.spool_fd >= 0) close(out.spool_fd);
    for (size_t k = 0; k < out.n_written; k++) free(out.written[k]);
    free(out.written);
    free(out.stage);
    zt_tokenizer_free(tok);
    free(inputs);
    return rc;
}
