/* hf.c — Hugging Face model directories (see hf.h): config.json (hf_config.c), the mapping between zerotrain's
 * parameter table and the family's Hugging Face tensor names over one safetensors file or an index of
 * shards, and the files an exported directory holds (weights, configs, tokenizer). The file format
 * itself is hf_safetensors.c. */
#define _GNU_SOURCE
#include "io/hf.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/hf_config.h"
#include "io/hf_safetensors.h"
#include "util/json.h"
#include "io/tokenizer.h"

#define HF_WEIGHTS "model.safetensors"
#define HF_INDEX "model.safetensors.index.json"

static int is_regular(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* 1 when DIR/NAME is a regular file */
static int has_file(const char *dir, const char *name) {
    char *p = zt_path_join(dir, name);
    int ok = is_regular(p);
    free(p);
    return ok;
}

int zt_hf_probe(const char *dir) {
    return has_file(dir, "config.json") && (has_file(dir, HF_WEIGHTS) || has_file(dir, HF_INDEX));
}

/* ---------------------------------------------------------------- config.json */

int zt_hf_read_config(const char *dir, zt_gpt2_shape *shape, zt_err *err) {
    char *path = zt_path_join(dir, "config.json");
    zt_json root;
    int rc = zt_json_read_file(path, &root, err);
    if (!rc) rc = zt_hf_config_parse(&root, path, shape, err);
    zt_json_free(&root);
    free(path);
    return rc;
}

/* ---------------------------------------------------------------- the tensors of a model */

/* Every tensor a model's weights hold, from one safetensors file or from the shards an index
 * names: only headers are kept (and the shards' files open); data is read tensor by tensor. */
typedef struct src_tensor {
    const char *name;
    zt_st_file *file;
    const zt_st_tensor *t;
    int used;
} src_tensor;

typedef struct weights {
    zt_st_file *files;
    int n_files;
    src_tensor *tensors;
    int count;
    char *where; /* the file or the index, for messages */
    zt_json index;
} weights;

static void weights_close(weights *w) {
    for (int i = 0; i < w->n_files; i++) zt_st_close(&w->files[i]);
    free(w->files);
    free(w->tensors);
    zt_json_free(&w->index);
    free(w->where);
    memset(w, 0, sizeof *w);
}

static int open_single(weights *w, const char *path, zt_err *err) {
    w->files = zt_xcalloc(1, sizeof *w->files);
    if (zt_st_open(&w->files[0], path, err)) return -1;
    w->n_files = 1;
    w->where = zt_xstrdup(path);
    w->count = w->files[0].count;
    w->tensors = zt_xcalloc((size_t)w->count + 1, sizeof *w->tensors);
    for (int i = 0; i < w->count; i++)
        w->tensors[i] = (src_tensor){w->files[0].tensors[i].name, &w->files[0], &w->files[0].tensors[i], 0};
    return 0;
}

/* INDEX_PATH's weight_map {"tensor name": "shard file", ...}: opens each shard once (its header),
 * checks that each holds the tensors the index puts there and nothing else. */
static int open_index(weights *w, const char *index_path, zt_err *err) {
    w->where = zt_xstrdup(index_path);
    if (zt_json_read_file(index_path, &w->index, err)) return -1;
    const zt_json *map = zt_json_get(&w->index, "weight_map");
    if (!map || map->type != ZT_JSON_OBJECT)
        return zt_fail(err, "%s: not a safetensors index (no \"weight_map\" object)", index_path);
    char *dir = zt_xstrdup(index_path);
    char *slash = strrchr(dir, '/');
    if (slash) slash[1] = '\0';
    else snprintf(dir, strlen(dir) + 1, ".");
    w->files = zt_xcalloc((size_t)map->n + 1, sizeof *w->files);
    w->tensors = zt_xcalloc((size_t)map->n + 1, sizeof *w->tensors);
    int rc = 0;
    for (int i = 0; i < map->n && !rc; i++) {
        const zt_json *v = &map->items[i];
        if (v->type != ZT_JSON_STRING || !v->str[0] || strchr(v->str, '/')) {
            rc = zt_fail(err, "%s:%d:%d: tensor %s: expected the file name of a shard", index_path, v->line, v->col, map->keys[i]);
            break;
        }
        char *shard = zt_path_join(dir, v->str);
        zt_st_file *f = NULL;
        for (int k = 0; k < w->n_files && !f; k++)
            if (strcmp(w->files[k].path, shard) == 0) f = &w->files[k];
        if (!f) {
            f = &w->files[w->n_files];
            if (zt_st_open(f, shard, err)) {
                size_t n = strlen(err->msg);
                snprintf(err->msg + n, sizeof err->msg - n, " (a shard named in %s:%d:%d)", index_path, v->line, v->col);
                rc = -1;
            } else {
                w->n_files++;
            }
        }
        const zt_st_tensor *t = rc ? NULL : zt_st_find(f, map->keys[i]);
        if (!rc && !t)
            rc = zt_fail(err, "%s: no tensor %s, which %s:%d:%d says it holds", shard, map->keys[i], index_path, v->key_line,
                         v->key_col);
        if (!rc) w->tensors[w->count++] = (src_tensor){map->keys[i], f, t, 0};
        free(shard);
    }
    for (int k = 0; k < w->n_files && !rc; k++) /* a shard's tensors the index does not list are a mismatch */
        for (int i = 0; i < w->files[k].count && !rc; i++) {
            const zt_json *v = zt_json_get(map, w->files[k].tensors[i].name);
            char *named = v && v->type == ZT_JSON_STRING ? zt_path_join(dir, v->str) : NULL;
            if (!named || strcmp(named, w->files[k].path) != 0)
                rc = zt_fail(err, "%s: holds tensor %s, which %s does not list for this shard", w->files[k].path,
                             w->files[k].tensors[i].name, index_path);
            free(named);
        }
    free(dir);
    return rc;
}

/* Opens PATH: a directory (its model.safetensors, else its model.safetensors.index.json), a
 * .safetensors file or an index .json file. */
static int weights_open(weights *w, const char *path, zt_err *err) {
    memset(w, 0, sizeof *w);
    int rc;
    if (is_dir(path)) {
        char *single = zt_path_join(path, HF_WEIGHTS), *index = zt_path_join(path, HF_INDEX);
        rc = is_regular(single) || !is_regular(index) ? open_single(w, single, err) : open_index(w, index, err);
        free(single);
        free(index);
    } else if (ends_with(path, ".json")) {
        rc = open_index(w, path, err);
    } else {
        rc = open_single(w, path, err);
    }
    if (rc) weights_close(w);
    return rc;
}

static src_tensor *find(weights *w, const char *name) {
    for (int i = 0; i < w->count; i++)
        if (strcmp(w->tensors[i].name, name) == 0) return &w->tensors[i];
    return NULL;
}

static void shape_str(char *buf, size_t n, const int64_t *shape, int ndim) {
    size_t k = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && k < n; i++) k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

/* a tensor by its name with or without the "transformer." prefix */
static src_tensor *find_either(weights *w, const char *bare) {
    char full[96];
    snprintf(full, sizeof full, "transformer.%s", bare);
    src_tensor *t = find(w, full);
    return t ? t : find(w, bare);
}

/* Checks the numbers config.json gives (S) against the tensors W's headers hold, before anything is
 * sized from them: a config.json is a small text file anyone edits, the weights are what the model is.
 * The token embedding is [vocab_size, hidden] (or the tied lm_head), GPT-2's wpe [n_positions, n_embd],
 * and the blocks are h.0 ... h.(n_layer - 1) (the Llama family's model.layers.N). One line naming the
 * tensor (or the blocks) and both sides. */
static int check_config_against(weights *w, const zt_gpt2_shape *s, const char *config_path, zt_err *err) {
    int llama = zt_shape_is_llama(s);
    const char *family = llama ? zt_model_type_name(s->model_type) : "GPT-2";
    const struct { const char *name, *alt; int64_t d0; const char *k0; } want[2] = {
        {llama ? "model.embed_tokens.weight" : "wte.weight", "lm_head.weight", s->vocab_size, "vocab_size"},
        {"wpe.weight", NULL, s->n_positions, "n_positions"}};
    char a[96], b[96];
    for (int i = 0; i < 2 - llama; i++) {
        src_tensor *t = llama ? find(w, want[i].name) : find_either(w, want[i].name);
        if (!t && want[i].alt) t = find(w, want[i].alt);
        if (!t) return zt_fail(err, "%s: no tensor %s%s (a %s's weights hold it)", w->where, llama ? "" : "transformer.",
                               want[i].name, family);
        int64_t need[2] = {want[i].d0, s->n_embd};
        if (t->t->ndim != 2 || t->t->shape[0] != need[0] || t->t->shape[1] != need[1]) {
            shape_str(a, sizeof a, t->t->shape, t->t->ndim);
            shape_str(b, sizeof b, need, 2);
            return zt_fail(err, "%s does not match %s: tensor %s is %s there, the config's %s and %s make it %s",
                           config_path, t->file->path, t->name, a, want[i].k0, llama ? "hidden_size" : "n_embd", b);
        }
    }
    const char *block = llama ? "model.layers." : "h.";
    size_t block_len = strlen(block);
    long blocks = 0; /* 1 + the highest N of the tensors named h.N.* (model.layers.N.*) */
    for (int i = 0; i < w->count; i++) {
        const char *n = w->tensors[i].name;
        if (!llama && !strncmp(n, "transformer.", 12)) n += 12;
        if (strncmp(n, block, block_len) || n[block_len] < '0' || n[block_len] > '9') continue;
        char *end;
        long l = strtol(n + block_len, &end, 10);
        if (*end == '.' && l < INT_MAX && l + 1 > blocks) blocks = l + 1;
    }
    if (blocks != s->n_layer)
        return zt_fail(err, "%s does not match %s: %s is %d, the weights hold %ld blocks (%s%s0 to %s%s%ld)", config_path,
                       w->where, llama ? "num_hidden_layers" : "n_layer", s->n_layer, blocks, llama ? "" : "transformer.",
                       block, llama ? "" : "transformer.", block, blocks - 1);
    return 0;
}

/* Opens the weights at PATH and checks them against S, the shape DIR/config.json gives: 0 with W
 * open, or -1 with W closed. */
static int weights_open_checked(weights *w, const char *path, const char *dir, const zt_gpt2_shape *s, zt_err *err) {
    if (weights_open(w, path, err)) return -1;
    char *config_path = zt_path_join(dir, "config.json");
    int rc = check_config_against(w, s, config_path, err);
    free(config_path);
    if (rc) weights_close(w);
    return rc;
}

int zt_hf_read_model_shape(const char *dir, zt_gpt2_shape *shape, zt_err *err) {
    weights w;
    if (zt_hf_read_config(dir, shape, err) || weights_open_checked(&w, dir, dir, shape, err)) return -1;
    weights_close(&w);
    return 0;
}

static void param_shape_str(char *buf, size_t n, const zt_param_info *p) {
    int64_t s[2] = {p->shape[0], p->shape[1]};
    shape_str(buf, n, s, p->ndim);
}

static int shape_matches(const zt_st_tensor *t, const zt_param_info *p) {
    if (t->ndim != p->ndim) return 0;
    for (int d = 0; d < p->ndim; d++)
        if (t->shape[d] != p->shape[d]) return 0;
    return 1;
}

/* buffers a state dict may carry that are not parameters: GPT-2's causal masks, the rotary frequencies */
static int is_ignored_buffer(const char *name) {
    return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias") || ends_with(name, ".rotary_emb.inv_freq");
}

/* Reads every parameter of TABLE from W into FLAT (see zt_hf_load for the name rules). */
static int load_params(weights *w, const zt_param_table *table, float *flat, zt_err *err) {
    char a[96], b[96];
    /* a tied head is the token embedding (entry 0): a file may still hold it as lm_head.weight */
    const zt_param_info *wte = table->lm_head < 0 ? &table->params[0] : NULL;
    src_tensor *lm_head = wte ? find(w, "lm_head.weight") : NULL;
    if (lm_head) {
        lm_head->used = 1;
        if (wte && !shape_matches(lm_head->t, wte)) {
            shape_str(a, sizeof a, lm_head->t->shape, lm_head->t->ndim);
            param_shape_str(b, sizeof b, wte);
            return zt_fail(err, "%s: tensor lm_head.weight has shape %s, but the head is tied to %s, which the config makes %s",
                           lm_head->file->path, a, wte->name, b);
        }
    }
    for (int i = 0; i < table->count; i++) {
        const zt_param_info *p = &table->params[i];
        const char *bare = strncmp(p->name, "transformer.", 12) == 0 ? p->name + 12 : p->name;
        src_tensor *full = find(w, p->name), *short_ = find(w, bare), *s = full ? full : short_;
        if (full && short_ && full != short_)
            return zt_fail(err, "%s: tensor %s appears twice (as %s and %s)", w->where, p->name, full->name, short_->name);
        if (!s && p == wte && lm_head) s = lm_head; /* a checkpoint that stores only the tied head */
        if (!s) {
            param_shape_str(a, sizeof a, p);
            return zt_fail(err, "%s: missing tensor %s (the config needs it, shape %s)", w->where, p->name, a);
        }
        s->used = 1;
        if (!shape_matches(s->t, p)) {
            shape_str(a, sizeof a, s->t->shape, s->t->ndim);
            param_shape_str(b, sizeof b, p);
            return zt_fail(err, "%s: tensor %s has shape %s, the config needs %s", s->file->path, s->name, a, b);
        }
        if (!s->t->readable)
            return zt_fail(err, "%s: tensor %s has dtype %s, zerotrain reads F32, BF16 and F16", s->file->path, s->name,
                           s->t->dtype_name);
        if (zt_st_read_f32(s->file, s->t, flat + p->offset, err)) return -1;
        size_t bad = zt_first_nonfinite(flat + p->offset, p->numel); /* a NaN would train, sample and evaluate to NaN */
        if (bad < p->numel)
            return zt_fail(err, "%s: tensor %s holds %g at element %zu (weights must be finite)", s->file->path, s->name,
                           (double)flat[p->offset + bad], bad);
    }
    for (int i = 0; i < w->count; i++)
        if (!w->tensors[i].used && !is_ignored_buffer(w->tensors[i].name))
            return zt_fail(err, "%s: unexpected tensor %s (not a parameter of the model the config describes: %d layers%s)",
                           w->tensors[i].file->path, w->tensors[i].name, table->n_layer,
                           table->lm_head < 0 && !strcmp(w->tensors[i].name, "lm_head.weight") ? ", tied head" : "");
    return 0;
}

int zt_hf_load(const char *path, const zt_param_table *table, float *flat, zt_err *err) {
    weights w;
    if (weights_open(&w, path, err)) return -1;
    int rc = load_params(&w, table, flat, err);
    weights_close(&w);
    return rc;
}

void zt_hf_folder_of(const char *path, char *dir, size_t cap) {
    snprintf(dir, cap, "%s", path);
    if (!is_dir(dir) && (ends_with(dir, ".safetensors") || ends_with(dir, ".json"))) {
        char *slash = strrchr(dir, '/');
        if (slash) *slash = '\0';
        else snprintf(dir, cap, ".");
    }
}

int zt_hf_init_from(const char *path, const zt_gpt2_shape *shape, const zt_param_table *table, float *out,
                    zt_err *err) {
    char dir[4096];
    zt_hf_folder_of(path, dir, sizeof dir);
    zt_gpt2_shape theirs;
    if (zt_hf_read_config(dir, &theirs, err)) return -1;
    if (!zt_shape_is_llama(&theirs) && !zt_shape_is_llama(shape)) {
        if (theirs.n_layer != shape->n_layer || theirs.n_head != shape->n_head || theirs.n_embd != shape->n_embd ||
            theirs.vocab_size != shape->vocab_size || theirs.n_positions < shape->n_positions)
            return zt_fail(err, "%s/config.json: model.init_from is GPT-2 L%d H%d C%d V%d P%d, the config asks for "
                                "L%d H%d C%d V%d P%d", dir, theirs.n_layer, theirs.n_head, theirs.n_embd,
                           theirs.vocab_size, theirs.n_positions, shape->n_layer, shape->n_head, shape->n_embd,
                           shape->vocab_size, shape->n_positions);
        if (theirs.n_positions != shape->n_positions)
            return zt_fail(err, "%s/config.json: n_positions %d differs from model.n_positions %d (wpe shapes must match)",
                           dir, theirs.n_positions, shape->n_positions);
    } else {
        /* rotary positions: the run may use a shorter context than the model was built for */
        zt_gpt2_shape same = theirs;
        if (zt_shape_is_llama(&theirs) && shape->n_positions <= theirs.n_positions) same.n_positions = shape->n_positions;
        const char *key = zt_hf_config_mismatch(&same, shape);
        if (key)
            return zt_fail(err, "%s/config.json: model.init_from is a %s model that differs from the config's model "
                                "section in %s", dir, zt_model_type_name(theirs.model_type), key);
    }
    weights w;
    if (weights_open_checked(&w, path, dir, &theirs, err)) return -1;
    int rc = load_params(&w, table, out, err);
    weights_close(&w);
    return rc;
}

/* ---------------------------------------------------------------- writing */

/* GPT-2's <|endoftext|>, or the last id of a smaller vocabulary */
static int eos_id(const zt_gpt2_shape *s) { return s->vocab_size > ZT_TOKEN_EOT ? ZT_TOKEN_EOT : s->vocab_size - 1; }

static int write_configs(const char *dir, const zt_gpt2_shape *s, const char *torch_dtype, zt_err *err) {
    zt_sb text = {0};
    int eos = eos_id(s);
    zt_hf_config_text(s, torch_dtype, eos, &text);
    int rc = zt_file_write_all(dir, "config.json", text.p, strlen(text.p), err);
    free(text.p);
    if (rc) return -1;
    char gen[128];
    int n = snprintf(gen, sizeof gen, "{\n  \"bos_token_id\": %d,\n  \"eos_token_id\": %d\n}\n", eos, eos);
    return zt_file_write_all(dir, "generation_config.json", gen, (size_t)n, err);
}

int zt_hf_save(const char *dir, const zt_param_table *table, const zt_gpt2_shape *shape, zt_hf_read_fn read_tensor,
               void *ctx, const char *dtype, zt_err *err) {
    const char *torch_dtype = !strcmp(dtype, "F32") ? "float32" : !strcmp(dtype, "BF16") ? "bfloat16"
                              : !strcmp(dtype, "F16") ? "float16" : NULL;
    if (!torch_dtype) return zt_fail(err, "unsupported safetensors dtype \"%s\" (F32, BF16 or F16)", dtype);
    if (zt_mkdir_p(dir, err)) return -1;
    zt_st_entry *e = zt_xcalloc((size_t)table->count, sizeof *e);
    for (int i = 0; i < table->count; i++) {
        const zt_param_info *p = &table->params[i];
        e[i] = (zt_st_entry){p->name, p->ndim, {p->shape[0], p->ndim == 2 ? p->shape[1] : 0}, p->numel, p->offset};
    }
    int rc = zt_st_write(dir, HF_WEIGHTS, e, table->count, dtype, read_tensor, ctx, err);
    free(e);
    if (rc) return -1;
    /* a model.safetensors beside an index from an earlier sharded save would be ambiguous: the
     * single file wins when reading, and the stale index goes */
    char *index = zt_path_join(dir, HF_INDEX);
    if (is_regular(index) && unlink(index) != 0) rc = zt_fail(err, "%s: cannot remove the stale index: %s", index, strerror(errno));
    free(index);
    return rc ? rc : write_configs(dir, shape, torch_dtype, err);
}

/* ---------------------------------------------------------------- tokenizer files */

static int copy_file(const char *from, const char *dir, const char *name, zt_err *err) {
    size_t len;
    char *text = zt_read_file(from, &len, err);
    if (!text) return -1;
    int rc = zt_file_write_all(dir, name, text, len, err);
    free(text);
    return rc;
}

/* PATH's tokenizer.json (PATH the file or its folder) as it is, with the tokenizer_config.json that makes
 * AutoTokenizer read it as a fast tokenizer */
static int save_tokenizer_json(const char *dir, const char *path, int tokens, const zt_gpt2_shape *shape,
                               zt_err *why_not, zt_err *err) {
    if (tokens > shape->vocab_size) {
        zt_fail(why_not, "%s has %d tokens, more than the model's vocab_size %d", path, tokens, shape->vocab_size);
        return 1;
    }
    char *json = is_dir(path) ? zt_path_join(path, "tokenizer.json") : zt_xstrdup(path);
    int rc = copy_file(json, dir, "tokenizer.json", err);
    free(json);
    if (rc) return -1;
    char text[512];
    int n = snprintf(text, sizeof text,
                     "{\n  \"clean_up_tokenization_spaces\": false,\n  \"model_max_length\": %d,\n"
                     "  \"tokenizer_class\": \"PreTrainedTokenizerFast\"\n}\n", shape->n_positions);
    return zt_file_write_all(dir, "tokenizer_config.json", text, (size_t)n, err);
}

int zt_hf_save_tokenizer(const char *dir, const char *vocab_dir, const zt_gpt2_shape *shape, zt_err *why_not,
                         zt_err *err) {
    zt_tokenizer *tok = zt_tokenizer_load(vocab_dir, why_not);
    if (!tok) return 1;
    int tokens = zt_tokenizer_vocab_size(tok);
    zt_tokenizer_free(tok);
    char *encoder = zt_path_join(vocab_dir, "encoder.json"), *merges = zt_path_join(vocab_dir, "vocab.bpe");
    if (!is_dir(vocab_dir) || has_file(vocab_dir, "tokenizer.json") || access(encoder, R_OK) != 0) {
        /* a tokenizer.json (preferred in a folder, as zt_tokenizer_load does): PreTrainedTokenizerFast reads it */
        free(encoder);
        free(merges);
        return save_tokenizer_json(dir, vocab_dir, tokens, shape, why_not, err);
    }
    if (shape->vocab_size < ZT_GPT2_VOCAB_SIZE) {
        zt_fail(why_not, "the model's vocab_size %d is smaller than GPT-2's %d tokens", shape->vocab_size, ZT_GPT2_VOCAB_SIZE);
        free(encoder);
        free(merges);
        return 1;
    }
    int rc = copy_file(encoder, dir, "vocab.json", err); /* GPT-2's vocab.json and merges.txt are these files */
    if (!rc) rc = copy_file(merges, dir, "merges.txt", err);
    free(encoder);
    free(merges);
    if (rc) return -1;
    static const char special[] = "{\n"
                                  "    \"content\": \"<|endoftext|>\",\n"
                                  "    \"lstrip\": false,\n"
                                  "    \"normalized\": true,\n"
                                  "    \"rstrip\": false,\n"
                                  "    \"single_word\": false\n"
                                  "  }";
    char text[2048];
    int n = snprintf(text, sizeof text, "{\n  \"bos_token\": %s,\n  \"eos_token\": %s,\n  \"unk_token\": %s\n}\n", special,
                     special, special);
    if (zt_file_write_all(dir, "special_tokens_map.json", text, (size_t)n, err)) return -1;
    n = snprintf(text, sizeof text,
                 "{\n"
                 "  \"add_bos_token\": false,\n"
                 "  \"add_prefix_space\": false,\n"
                 "  \"added_tokens_decoder\": {\n"
                 "    \"%d\": {\n"
                 "      \"content\": \"<|endoftext|>\",\n"
                 "      \"lstrip\": false,\n"
                 "      \"normalized\": true,\n"
                 "      \"rstrip\": false,\n"
                 "      \"single_word\": false,\n"
                 "      \"special\": true\n"
                 "    }\n"
                 "  },\n"
                 "  \"bos_token\": \"<|endoftext|>\",\n"
                 "  \"clean_up_tokenization_spaces\": false,\n"
                 "  \"eos_token\": \"<|endoftext|>\",\n"
                 "  \"errors\": \"replace\",\n"
                 "  \"model_max_length\": %d,\n"
                 "  \"pad_token\": null,\n"
                 "  \"tokenizer_class\": \"GPT2Tokenizer\",\n"
                 "  \"unk_token\": \"<|endoftext|>\"\n"
                 "}\n",
                 ZT_TOKEN_EOT, shape->n_positions);
    return zt_file_write_all(dir, "tokenizer_config.json", text, (size_t)n, err);
}
