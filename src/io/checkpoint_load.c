/* checkpoint_load.c — loading a step directory into the engine, whatever world size and ZeRO
 * stage saved it. One path for every engine: the parameters this rank holds (the full vector at
 * stages 0-2, its shard at stage 3) go into the compute-dtype parameter buffer; master, m and v of
 * the optimizer range go where the state view (io/state_view.h) says the engine keeps each piece
 * (device memory, or host memory with Twin-Flow offload or on the cpu backend).
 *
 * The ranges are of the engine's local vector: the whole model's, or a tensor-parallel rank's part.
 * A checkpoint saved at the same tensor-parallel size holds that very vector (read_mine reads it
 * from the saved tp rank's files); saved at another, the part's rows are taken from the whole rows
 * they belong to (zt_tp_take_row), a bounded number of rows at a time. */
#include "io/checkpoint_internal_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm/fail_together.h"
#include "io/checkpoint_async.h"

/* Device buffers of the cpu backend are host memory: fp32 parameters are read in place. */
static int host_memory(const zt_backend *be) { return be->memory_is_host; }

typedef struct param_ctx {
    const zt_backend *be;
    void *dst;   /* device parameter buffer; element `base` of the flat vector is dst[0] */
    size_t base;
    float *tmp;  /* device fp32 scratch (16-bit backends) */
} param_ctx;

/* fp32 parameters: copy up */
static int sink_f32(void *ctx, size_t off, const float *host, size_t n) {
    param_ctx *c = ctx;
    c->be->copy((float *)c->dst + (off - c->base), host, n * sizeof(float), ZT_H2D);
    return 0;
}

/* 16-bit parameters: fp32 up to scratch, converted into params */
static int sink_convert(void *ctx, size_t off, const float *host, size_t n) {
    param_ctx *c = ctx;
    const zt_backend *be = c->be;
    be->copy(c->tmp, host, n * sizeof(float), ZT_H2D);
    be->to_compute((char *)c->dst + (off - c->base) * zt_dtype_size(be->compute_dtype), c->tmp, n);
    return 0;
}

/* offloaded parameters (offload_param): the engine converts them on the host */
typedef struct { zt_state_view *sv; } params_host_ctx;
static int sink_params_host(void *ctx, size_t off, const float *host, size_t n) {
    zt_state_view *sv = ((params_host_ctx *)ctx)->sv;
    sv->params_write_f32(sv->owner, off, host, n);
    return 0;
}

/* optimizer state goes wherever the engine keeps it */
typedef struct { zt_state_view *sv; int which; } state_ctx;
static int sink_state(void *ctx, size_t off, const float *host, size_t n) {
    state_ctx *c = ctx;
    c->sv->state_write(c->sv->owner, c->which, off - c->sv->lay.opt_lo, n, host);
    return 0;
}

static void shape_text(const zt_param_info *p, char *buf, size_t cap) {
    if (p->ndim == 2) snprintf(buf, cap, "[%d, %d]", p->shape[0], p->shape[1]);
    else snprintf(buf, cap, "[%d]", p->shape[0]);
}

/* the current model must be the saved one, tensor by tensor (both whole tables) */
static int check_model(const zt_checkpoint_reader *r, const zt_param_table *t, zt_err *err) {
    const zt_param_table *s = &r->table;
    const char *path = r->index_path;
    if (s->count != t->count)
        return zt_fail(err, "%s: checkpoint is for a different model: it has %d tensors (n_layer %d), the config needs %d", path,
                       s->count, r->meta.shape.n_layer, t->count);
    for (int i = 0; i < s->count; i++) {
        const zt_param_info *a = &s->params[i], *b = &t->params[i];
        if (strcmp(a->name, b->name))
            return zt_fail(err, "%s: checkpoint is for a different model: tensor %d is %s, the config needs %s", path, i, a->name,
                           b->name);
        if (a->ndim != b->ndim || a->shape[0] != b->shape[0] || (a->ndim == 2 && a->shape[1] != b->shape[1])) {
            char sa[48], sb[48];
            shape_text(a, sa, sizeof sa);
            shape_text(b, sb, sizeof sb);
            return zt_fail(err, "%s: checkpoint is for a different model: tensor %s has shape %s, the config needs %s", path,
                           a->name, sa, sb);
        }
        if (a->offset != b->offset)
            return zt_fail(err, "%s: checkpoint is for a different model: tensor %s is at offset %zu, the config needs %zu", path,
                           a->name, a->offset, b->offset);
    }
    return 0;
}

/* What this rank's local vector is made of: its table, the whole model's, and buffers of whole rows and
 * of its rows for a checkpoint of another tensor-parallel size. */
typedef struct mine_ctx {
    zt_checkpoint_reader *r;
    const zt_param_table *mine, *whole;
    float *whole_rows, *rows;
} mine_ctx;

/* Elements [a, b) of this rank's local vector v into t: saved at this tensor-parallel size, straight
 * from the saved tp rank's files; else tensor by tensor, from the whole rows its rows are part of. */
static int read_mine(mine_ctx *c, int v, size_t a, size_t b, const ck_target *t, zt_err *err) {
    zt_checkpoint_reader *r = c->r;
    if (r->part.tp == c->mine->tp_size) return ck_read_range(r, c->mine->tp_rank, v, a, b, t, err);
    if (!c->rows) {
        c->whole_rows = zt_xmalloc(CK_ROWS_ELEMS * sizeof *c->whole_rows);
        c->rows = zt_xmalloc(CK_ROWS_ELEMS * sizeof *c->rows);
    }
    for (int i = 0; i < c->mine->count; i++) {
        const zt_param_info *p = &c->mine->params[i], *w = &c->whole->params[i];
        size_t cols = (size_t)zt_param_cols(p), wcols = (size_t)zt_param_cols(w);
        /* (wte's padding rows past the vocabulary are not in the checkpoint: they stay zero) */
        size_t x = ck_max(a, p->offset), y = ck_min(b, p->offset + (size_t)zt_tp_rows_in_whole(p) * cols), l1;
        if (x >= y) continue;
        size_t per = CK_ROWS_ELEMS / wcols; /* a whole row is at most 4 n_embd elements */
        for (size_t l0 = (x - p->offset) / cols; p->offset + l0 * cols < y; l0 = l1) {
            l1 = ck_min(l0 + per, (size_t)zt_tp_rows_in_whole(p));
            /* its rows [l0, l1) are whole rows [w0, w0 + l1 - l0) */
            size_t w0 = (size_t)zt_tp_whole_row(p, (int)l0);
            if (ck_read_whole(r, v, w->offset + w0 * wcols, w->offset + (w0 + l1 - l0) * wcols, c->whole_rows, err))
                return -1;
            for (size_t l = l0; l < l1; l++) zt_tp_take_row(p, c->whole_rows + (l - l0) * wcols, c->rows + (l - l0) * cols);
            size_t lo = ck_max(x, p->offset + l0 * cols), hi = ck_min(y, p->offset + l1 * cols);
            if (ck_deliver(t, a, lo, c->rows + (lo - p->offset - l0 * cols), hi - lo))
                return zt_fail(err, "%s: cannot deliver data", r->index_path);
        }
    }
    return 0;
}

static int load_local(const char *step_dir, zt_state_view *sv, const zt_gpt2_shape *shape, zt_train_state *st,
                      zt_checkpoint_meta *meta, int allow_unverified, zt_err *err) {
    const zt_backend *be = sv->be;
    int host = host_memory(be), fp32 = be->compute_dtype == ZT_F32;
    zt_checkpoint_reader *r = ck_reader_open(step_dir, host ? NULL : be, allow_unverified, err);
    if (!r) return -1;
    zt_param_table whole;
    int rc = zt_gpt2_param_table(&whole, shape, err);
    if (rc) {
        zt_checkpoint_close(r);
        return -1;
    }
    rc = check_model(r, &whole, err);
    mine_ctx mc = {r, sv->table, &whole, NULL, NULL};
    /* parameters: the full vector at stages 0-2, the shard at stage 3 */
    size_t pa = sv->lay.stage == 3 ? sv->lay.lo : 0, pb = sv->lay.stage == 3 ? sv->lay.hi : sv->lay.total;
    param_ctx pc = {be, sv->params, pa, NULL};
    params_host_ctx phc = {sv};
    int params_host = sv->params_on_host;
    ck_target pt = {(host || params_host) && fp32 ? (float *)sv->params : NULL, fp32 ? sink_f32 : sink_convert, &pc};
    if (params_host && (!fp32 || !sv->params)) pt = (ck_target){NULL, sink_params_host, &phc}; /* NVMe: no buffer */
    if (!fp32 && !params_host) { /* staged pieces are at most the staging size (whole chunks): the scratch matches it */
        size_t cap = ck_max(CK_STAGE_ELEMS, ck_chunk_elems(r->meta.shard));
        pc.tmp = be->alloc(cap * sizeof(float));
        if (!pc.tmp && !rc) rc = zt_fail(err, "out of %s memory for a %zu MiB load buffer", be->name, cap * 4 >> 20);
    }
    if (!rc) rc = read_mine(&mc, ZT_CKPT_MASTER, pa, pb, &pt, err);
    /* master, m and v of the optimizer range, piece by piece where the engine keeps them: read in
     * place into host memory, through the view's state_write into device memory; a master piece that
     * is the parameter buffer itself (fp32) was filled by the parameter read */
    for (int v = 0; v < 3 && !rc; v++) {
        state_ctx c = {sv, v};
        for (size_t off = 0, k; off < sv->lay.opt_hi - sv->lay.opt_lo && !rc; off += k) {
            int in_host;
            float *span = sv->state_span(sv->owner, v, off, &k, &in_host);
            size_t a = sv->lay.opt_lo + off;
            if (v == ZT_CKPT_MASTER && fp32 && span && span == (float *)sv->params + (a - pa)) continue;
            ck_target t = {in_host ? span : NULL, sink_state, &c};
            rc = read_mine(&mc, v, a, a + k, &t, err);
        }
    }
    be->synchronize();
    if (pc.tmp) be->free(pc.tmp);
    if (!rc) {
        sv->set_steps(sv->owner, r->meta.adam_t);
        if (st) *st = r->state;
        if (meta) {
            *meta = r->meta;
            meta->config_text = zt_xstrdup(r->meta.config_text);
        }
    }
    free(mc.whole_rows);
    free(mc.rows);
    zt_param_table_free(&whole);
    zt_checkpoint_close(r);
    return rc;
}

int zt_checkpoint_load(const char *step_dir, zt_state_view *sv, const zt_gpt2_shape *shape, zt_comm *comm,
                       zt_train_state *st, zt_checkpoint_meta *meta, int allow_unverified, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    double t0 = zt_now();
    if (meta) memset(meta, 0, sizeof *meta);
    int rc = zt_async_save_writing() /* the writer thread owns HDF5 until its save is finished */
                 ? zt_fail(err, "%s: not loaded while an asynchronous save is writing (a bug)", step_dir)
                 : load_local(step_dir, sv, shape, st, meta, allow_unverified, err);
    rc = zt_agree(comm, rc, err);
    if (rc && meta) zt_checkpoint_meta_free(meta);
    if (!rc) zt_info("checkpoint: loaded %s in %.2f s", step_dir, zt_now() - t0);
    ck_h5_restore(q);
    return rc;
}
