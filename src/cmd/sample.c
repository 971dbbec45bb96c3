/* sample.c — see sample.h */
#include "cmd/sample.h"
#include "cmd/help.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/blas_core.h"
#include "io/checkpoint.h"
#include "cmd/commands.h"
#include "io/data.h"
#include "io/hf.h"
#include "comm/fail_together.h"

const char *zt_default_vocab_dir(void) {
    static char path[PATH_MAX + 16]; /* process-wide, computed once */
    const char *env = getenv("ZEROTRAIN_VOCAB");
    if (env && *env) return env;
    if (access("data/gpt2/encoder.json", R_OK) == 0) return "data/gpt2";
    char exe[PATH_MAX];
    if (zt_exe_dir(exe, sizeof exe) == 0) {
        snprintf(path, sizeof path, "%.*s/data/gpt2", PATH_MAX - 16, exe);
        return path;
    }
    return "data/gpt2";
}

/* picks the next id from logits: greedy (argmax, lowest id on ties) when top_k == 1 or temperature
 * == 0, else softmax(logits / temperature) restricted to the top_k largest, sampled with rng */
static int pick(float *logits, int V, const zt_sample_opts *o, zt_rng *rng) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (o->top_k == 1 || o->temperature <= 0.0f) return best;
    float cutoff = -INFINITY;
    if (o->top_k > 1 && o->top_k < V) { /* k-th largest by partial selection on a copy */
        float *tmp = zt_xmalloc((size_t)V * sizeof *tmp);
        memcpy(tmp, logits, (size_t)V * sizeof *tmp);
        int k = o->top_k, lo = 0, hi = V - 1;
        while (lo < hi) { /* quickselect for position V-k in ascending order */
            float pivot = tmp[(lo + hi) / 2];
            int i = lo, j = hi;
            while (i <= j) {
                while (tmp[i] < pivot) i++;
                while (tmp[j] > pivot) j--;
                if (i <= j) { float t = tmp[i]; tmp[i] = tmp[j]; tmp[j] = t; i++; j--; }
            }
            if (V - k <= j) hi = j;
            else if (V - k >= i) lo = i;
            else break;
        }
        cutoff = tmp[V - k];
        free(tmp);
    }
    double sum = 0;
    float mx = logits[best];
    for (int i = 0; i < V; i++) {
        double p = logits[i] >= cutoff ? exp((double)(logits[i] - mx) / o->temperature) : 0.0;
        logits[i] = (float)p;
        sum += p;
    }
    double u = zt_rng_uniform(rng) * sum, acc = 0;
    for (int i = 0; i < V; i++) {
        acc += logits[i];
        if (u < acc && logits[i] > 0) return i;
    }
    return best;
}

int zt_generate(zt_session *s, const int *prompt, int n_prompt, const zt_sample_opts *o, zt_ids *out, zt_err *err) {
    int T = s->cfg->seq_len, V = s->shape.vocab_size;
    zt_gpt2 gen;
    if (zt_gpt2_create(&gen, s->be, &s->shape, &s->table, s->tp_device_comm ? s->tp_device_comm : s->tp_comm, 1, T,
                       (zt_act_ckpt){0}, err))
        return -1;
    int *ctx = zt_xcalloc((size_t)n_prompt + (size_t)o->max_tokens, sizeof *ctx);
    memcpy(ctx, prompt, (size_t)n_prompt * sizeof *ctx);
    int n = n_prompt;
    int *window = zt_xcalloc((size_t)T, sizeof *window), rc = 0;
    float *logits = zt_xmalloc((size_t)V * sizeof *logits);
    zt_rng rng;
    zt_rng_seed(&rng, o->seed);
    for (int k = 0; k < o->max_tokens; k++) {
        int start = n > T ? n - T : 0, len = n - start;
        memset(window, 0, (size_t)T * sizeof *window);
        memcpy(window, ctx + start, (size_t)len * sizeof *window);
        zt_gpt2_forward(&gen, &s->src, window, NULL, 0.0f);
        zt_gpt2_logits_row(&gen, len - 1, logits); /* collective under tensor parallelism */
        /* a non-finite logit would pick token 0 forever (argmax of NaNs): every rank sees the same row */
        size_t bad = zt_first_nonfinite(logits, (size_t)V);
        if (bad < (size_t)V) {
            rc = zt_fail(err, "the model's logits are not finite (%g for token %zu at generated token %d): its weights "
                              "or activations overflow", (double)logits[bad], bad, k + 1);
            break;
        }
        int id = pick(logits, V, o, &rng);
        ctx[n++] = id;
        zt_ids_push(out, id);
        if (o->on_token) o->on_token(o->ctx, id);
    }
    free(logits);
    free(window);
    free(ctx);
    zt_gpt2_destroy(&gen);
    return rc;
}

void zt_sample_print(zt_session *s, int n_tokens, uint64_t seed) {
    zt_err err = {{0}};
    zt_tokenizer *tok = zt_tokenizer_load(zt_default_vocab_dir(), &err);
    zt_sample_opts o = {n_tokens, 1.0f, 40, seed, NULL, NULL};
    int eot = tok && zt_tokenizer_eot(tok) >= 0 ? zt_tokenizer_eot(tok) : ZT_TOKEN_EOT;
    if (eot >= s->shape.vocab_size) eot = 0;
    zt_ids ids = {0};
    if (zt_generate(s, &eot, 1, &o, &ids, &err) == 0 && zt_log_rank() == 0) {
        if (tok) {
            char *text = zt_tokenizer_decode_alloc(tok, ids.data, ids.n, NULL);
            zt_info("sample (top-k 40, temperature 1.0):\n---\n%s\n---", text);
            free(text);
        } else {
            zt_info("sample: (no vocabulary: %s) ids:", err.msg);
            for (size_t i = 0; i < ids.n; i++) printf("%d ", ids.data[i]);
            printf("\n");
        }
    }
    zt_ids_free(&ids);
    if (tok) zt_tokenizer_free(tok);
}

/* ---------------------------------------------------------------- sample / eval commands */

/* The full fp32 parameter vector of a checkpoint (a checkpoint directory's latest, or a step
 * directory), read through the index's virtual datasets with checksums verified. */
static float *weights_from_checkpoint(const char *step_dir, zt_gpt2_shape *shape, zt_err *err) {
    zt_checkpoint_reader *r = zt_checkpoint_open(step_dir, err);
    if (!r) return NULL;
    const zt_checkpoint_meta *meta = zt_checkpoint_reader_meta(r);
    *shape = meta->shape;
    float *w = zt_xmalloc(meta->total * sizeof *w);
    if (zt_checkpoint_read(r, ZT_CKPT_MASTER, 0, meta->total, w, err)) {
        free(w);
        w = NULL;
    }
    zt_checkpoint_close(r);
    return w;
}

/* A config for running a model on one rank, stage 0: MODEL is a zerotrain checkpoint (directory or
 * step directory) or a Hugging Face directory of a family zerotrain trains. Collective: rank 0 decides which for every
 * rank (ranks whose file system caches differ still read the same step). */
static int model_from_dir(zt_comm *comm, const char *dir, zt_config *cfg, float **weights, int T, int device,
                          zt_err *err) {
    zt_gpt2_shape shape;
    char step_dir[4096];
    float *from_checkpoint = NULL;
    int hf = comm->agree_max(comm, comm->rank == 0 ? zt_hf_probe(dir) : 0);
    int found = hf ? 0 : zt_checkpoint_resolve_shared(comm, dir, step_dir, sizeof step_dir, err);
    if (found < 0) return -1;
    if (found > 0) {
        from_checkpoint = weights_from_checkpoint(step_dir, &shape, err);
        if (!from_checkpoint) return -1;
    } else if (!hf) {
        return zt_fail(err, "%s: not a model (expected a zerotrain checkpoint, or model.safetensors and config.json)", dir);
    } else if (zt_hf_read_model_shape(dir, &shape, err)) {
        return -1;
    }
    zt_config_defaults(cfg);
    zt_shape_to_config(&shape, cfg);
    cfg->seq_len = T > 0 ? T : shape.n_positions;
    cfg->device = device;
    if (cfg->seq_len > shape.n_positions) {
        free(from_checkpoint);
        return zt_fail(err, "--seq-len %d exceeds the model's n_positions %d", cfg->seq_len, shape.n_positions);
    }
    if (from_checkpoint) {
        *weights = from_checkpoint;
        return 0;
    }
    zt_param_table table;
    zt_gpt2_shape s = zt_shape_from_config(cfg);
    if (zt_gpt2_param_table(&table, &s, err)) return -1;
    *weights = zt_xmalloc(table.total * sizeof(float));
    int rc = zt_hf_load(dir, &table, *weights, err);
    zt_param_table_free(&table);
    if (rc) { free(*weights); *weights = NULL; }
    return rc;
}

static int parse_int(const char *s, long lo, long hi, long *out) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*s == '\0' || *end != '\0' || v < lo || v > hi) return -1;
    *out = v;
    return 0;
}

static int parse_float(const char *s, double lo, double hi, double *out) {
    char *end;
    double v = strtod(s, &end);
    if (*s == '\0' || *end != '\0' || !(v >= lo && v <= hi)) return -1;
    *out = v;
    return 0;
}

int zt_cmd_eval(int argc, char **argv) {
    const char *model = NULL, *data = NULL, *grads_path = NULL;
    long B = 4, T = 64, nb = 10;
    int device = ZT_DEVICE_AUTO;
    zt_err err = {{0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--data") && v) data = v, i++;
        else if (!strcmp(a, "--grads") && v) grads_path = v, i++;
        else if (!strcmp(a, "--batch-size") && v) bad = parse_int(v, 1, 1 << 20, &B), i++;
        else if (!strcmp(a, "--seq-len") && v) bad = parse_int(v, 1, 1 << 20, &T), i++;
        else if (!strcmp(a, "--batches") && v) bad = parse_int(v, 1, 1 << 30, &nb), i++;
        else if (!strcmp(a, "--device") && v) bad = (device = zt_config_device_named(v)) < 0, i++;
        else if (a[0] != '-' && !model) model = a;
        else bad = 1;
        if (bad) return zt_help_bad_argument("eval", a, v);
    }
    if (!model || !data) return zt_help_missing("eval", !model ? "MODEL" : "--data FILE");
    zt_config cfg;
    float *weights = NULL;
    zt_comm *comm = zt_comm_mpi(NULL, &err);
    zt_log_set_rank(comm->rank);
    zt_session s;
    zt_dataset d;
    int rc = model_from_dir(comm, model, &cfg, &weights, (int)T, device, &err);
    char kernels[512];
    zt_info("%s", zt_blas_core_line(kernels, sizeof kernels));
    if (!rc) rc = zt_dataset_open(&d, data, (int)T, cfg.vocab_size, 0, &err);
    unsigned long long need = (unsigned long long)nb * (unsigned long long)B * (unsigned long long)T + 1;
    if (!rc && d.n_tokens < need) { /* reading on would wrap around and join the last token to the first */
        rc = zt_fail(&err, "%s: %zu tokens, but --batches %ld x --batch-size %ld x --seq-len %ld needs %llu (B*T*N+1); "
                           "use fewer batches", data, d.n_tokens, nb, B, T, need);
        zt_dataset_close(&d);
    }
    if (zt_fail_together(comm, rc, &err)) {
        if (!rc) zt_dataset_close(&d);
        free(weights);
        comm->destroy(comm);
        return 1;
    }
    rc = zt_session_open(&s, &cfg, comm, weights, (int)B, (int)T, &err);
    free(weights);
    if (zt_fail_together(comm, rc, &err)) { zt_dataset_close(&d); comm->destroy(comm); return 1; }
    int *in = zt_xmalloc((size_t)(B * T) * sizeof *in), *tg = zt_xmalloc((size_t)(B * T) * sizeof *tg);
    float dloss = grads_path ? (float)(1.0 / ((double)nb * B * T)) : 0.0f;
    zt_engine_begin_micro(s.engine, 1, 1);
    double sum = 0;
    for (long k = 0; k < nb && !rc; k++) { /* read as used (io/data.h): a bad batch stops every rank */
        rc = zt_dataset_sequential(&d, (size_t)(k * B * T), (int)B, in, tg, &err);
        if (zt_fail_together(comm, rc, &err)) { rc = 1; break; }
        sum += zt_gpt2_forward(&s.model, &s.src, in, tg, dloss);
        if (grads_path) zt_gpt2_backward(&s.model, &s.src);
    }
    if (!rc && !isfinite(sum)) { /* never a loss of nan with status 0: a script would take it for a number */
        fprintf(stderr, "zerotrain: error: eval: val_loss is %g on %s (the model's weights or activations overflow)\n",
                sum / nb, data);
        rc = 1;
    }
    if (!rc) zt_info("val_loss: %.6f", sum / nb);
    if (!rc && grads_path && comm->rank == 0) {
        size_t n = s.table.total;
        float *g = zt_xmalloc(n * sizeof *g);
        if (s.be->compute_dtype == ZT_F32) {
            s.be->copy(g, zt_engine_full_grads(s.engine), n * 4, ZT_D2H);
        } else { /* 16-bit gradients: widen on the device, then copy down */
            float *wide = s.be->alloc(n * sizeof *wide);
            if (wide) {
                s.be->to_f32(wide, zt_engine_full_grads(s.engine), n);
                s.be->copy(g, wide, n * sizeof *wide, ZT_D2H);
                s.be->free(wide);
            } else {
                fprintf(stderr, "zerotrain: error: out of %s memory widening the gradients\n", s.be->name);
                rc = 1;
            }
        }
        FILE *f = rc ? NULL : fopen(grads_path, "wb");
        if (!rc && (!f || fwrite(g, sizeof *g, n, f) != n)) {
            fprintf(stderr, "zerotrain: error: %s: cannot write gradients\n", grads_path);
            rc = 1;
        }
        if (f) fclose(f);
        free(g);
    }
    free(in);
    free(tg);
    zt_session_close(&s);
    zt_dataset_close(&d);
    comm->destroy(comm);
    return rc;
}

/* ---------------------------------------------------------------- streamed output */

/* Length of the longest prefix of S[0..N) that does not end inside a UTF-8 character still being
 * completed: a token may hold only the first bytes of a character whose rest comes with the next
 * token. Bytes that can never form a character are passed on as they are. */
static size_t complete_prefix(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t need = c < 0x80 ? 1 : (c >= 0xC2 && c < 0xE0) ? 2 : (c >= 0xE0 && c < 0xF0) ? 3 : (c >= 0xF0 && c < 0xF5) ? 4 : 1;
        size_t k = 1;
        while (k < need && i + k < n && (s[i + k] & 0xC0) == 0x80) k++;
        if (k < need && i + k == n) return i; /* the character's remaining bytes may still come */
        i += k;
    }
    return n;
}

/* Prints generated ids (or their text) to stdout as they arrive, flushing each time. */
typedef struct text_stream {
    const zt_tokenizer *tok;
    int print_ids, enabled, count;
    unsigned char held[4]; /* the first bytes of an unfinished character */
    size_t n_held;
} text_stream;

static void stream_token(void *ctx, int id) {
    text_stream *st = ctx;
    if (!st->enabled) return;
    if (st->print_ids) {
        printf(st->count++ ? " %d" : "%d", id);
        fflush(stdout);
        return;
    }
    size_t len;
    const char *bytes = zt_tokenizer_token_bytes(st->tok, id, &len);
    unsigned char *buf = zt_xmalloc(st->n_held + len + 1);
    memcpy(buf, st->held, st->n_held);
    if (len) memcpy(buf + st->n_held, bytes, len);
    size_t n = st->n_held + len, k = complete_prefix(buf, n);
    fwrite(buf, 1, k, stdout);
    fflush(stdout);
    st->n_held = n - k; /* at most 3 bytes */
    memcpy(st->held, buf + k, st->n_held);
    free(buf);
}

static void stream_end(text_stream *st) {
    if (!st->enabled) return;
    fwrite(st->held, 1, st->n_held, stdout);
    st->n_held = 0;
    putchar('\n');
    fflush(stdout);
}

int zt_cmd_sample(int argc, char **argv) {
    const char *model = NULL, *prompt = NULL, *vocab = NULL;
    long max_tokens = 64, top_k = 40, seed = 1337;
    int print_ids = 0, device = ZT_DEVICE_AUTO;
    double temperature = 1.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (!strcmp(a, "--prompt") && v) prompt = v, i++;
        else if (!strcmp(a, "--vocab") && v) vocab = v, i++;
        else if (!strcmp(a, "--print-ids")) print_ids = 1, v = a;
        else if (!strcmp(a, "--max-tokens") && v) bad = parse_int(v, 1, 1 << 20, &max_tokens), i++;
        else if (!strcmp(a, "--top-k") && v) bad = parse_int(v, 0, 1 << 30, &top_k), i++;
        else if (!strcmp(a, "--seed") && v) bad = parse_int(v, 0, 0x7fffffffffffffffL, &seed), i++;
        else if (!strcmp(a, "--temperature") && v) bad = parse_float(v, 0.0, 100.0, &temperature), i++;
        else if (!strcmp(a, "--device") && v) bad = (device = zt_config_device_named(v)) < 0, i++;
        else if (a[0] != '-' && !model) model = a;
        else bad = 1;
        if (bad || (!v && a[0] == '-')) return zt_help_bad_argument("sample", a, v == a ? NULL : v);
    }
    if (!model) return zt_help_missing("sample", "MODEL");
    zt_err err = {{0}};
    zt_comm *comm = zt_comm_mpi(NULL, &err);
    zt_log_set_rank(comm->rank);
    zt_tokenizer *tok = zt_tokenizer_load(vocab ? vocab : zt_default_vocab_dir(), &err);
    zt_config cfg;
    float *weights = NULL;
    int rc = zt_agree(comm, tok ? 0 : -1, &err);
    if (!rc) rc = model_from_dir(comm, model, &cfg, &weights, 0, device, &err);
    zt_session s;
    if (!zt_agree(comm, rc, &err)) rc = zt_session_open(&s, &cfg, comm, weights, 1, cfg.seq_len, &err);
    else rc = -1;
    free(weights);
    if (zt_fail_together(comm, rc, &err)) {
        if (tok) zt_tokenizer_free(tok);
        comm->destroy(comm);
        return 1;
    }
    /* stdout is the text: the kernel line goes with the messages */
    char kernels[512];
    if (comm->rank == 0) fprintf(stderr, "%s\n", zt_blas_core_line(kernels, sizeof kernels));
    zt_ids ids = {0}, out = {0};
    if (prompt) zt_tokenizer_encode(tok, prompt, strlen(prompt), &ids, &err);
    if (ids.n == 0) zt_ids_push(&ids, zt_tokenizer_eot(tok) >= 0 ? zt_tokenizer_eot(tok) : 0);
    for (size_t i = 0; i < ids.n; i++)
        if (ids.data[i] >= s.shape.vocab_size) {
            if (comm->rank == 0)
                fprintf(stderr, "zerotrain: error: sample: the prompt's token %d is outside the model's vocabulary (vocab_size %d)\n",
                        ids.data[i], s.shape.vocab_size);
            zt_ids_free(&ids);
            zt_session_close(&s);
            zt_tokenizer_free(tok);
            comm->destroy(comm);
            return 1;
        }
    text_stream st = {.tok = tok, .print_ids = print_ids, .enabled = comm->rank == 0};
    if (st.enabled && !print_ids && prompt) {
        fputs(prompt, stdout);
        fflush(stdout);
    }
    zt_sample_opts o = {(int)max_tokens, (float)temperature, (int)top_k, (uint64_t)seed, stream_token, &st};
    rc = zt_generate(&s, ids.data, (int)ids.n, &o, &out, &err);
    if (!rc) stream_end(&st);
    else if (comm->rank == 0) zt_print_error(&err);
    zt_ids_free(&ids);
    zt_ids_free(&out);
    zt_session_close(&s);
    zt_tokenizer_free(tok);
    comm->destroy(comm);
    return rc ? 1 : 0;
}
