/* selftest_bench.c — `zerotrain selftest --bench`: op timings at GPT-2 124M shapes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "comm/comm.h"
#include "comm/comm_nccl.h"
#include "config/config.h"
#include "engine/session.h"
#include "selftest/selftest.h"
#include "util/util.h"

/* ---------------------------------------------------------------- benchmark */
/* `zerotrain selftest --bench`: times each op of the table at GPT-2 124M shapes (C 768, NH 12,
 * V 50257 padded to 50304, B x T rows) and prints ms per call and TFLOP/s (GEMMs, attention) or
 * GB/s (memory-bound ops, counting the bytes each op must move at least once). Also measures a
 * bf16 GEMM peak and estimates one training step from the per-op times. Timing only: the inputs
 * are random and nothing is checked. */
typedef struct {
    const zt_backend *be;
    double min_s; /* time each op for at least this long */
} bench_ctx;

static void *bench_buf(bench_ctx *bc, size_t n, float scale, zt_rng *rng) {
    const zt_backend *be = bc->be;
    size_t es = zt_dtype_size(be->compute_dtype);
    void *d = st_alloc(be, n * es);
    size_t chunk = n < ((size_t)1 << 22) ? n : ((size_t)1 << 22);
    float *h = zt_xmalloc(chunk * sizeof(float));
    for (size_t i = 0; i < chunk; i++) h[i] = scale * zt_rng_normal(rng);
    float *t = st_up_f(be, h, chunk);
    for (size_t off = 0; off < n; off += chunk) {
        size_t k = n - off < chunk ? n - off : chunk;
        if (be->compute_dtype == ZT_F32) be->copy((char *)d + off * es, t, k * es, ZT_D2D);
        else be->to_compute((char *)d + off * es, t, k);
    }
    be->synchronize();
    be->free(t), free(h);
    return d;
}

/* the op under test, as a closure over the bench's buffers */
typedef struct bench_op bench_op;
struct bench_op {
    void (*run)(const zt_backend *be, bench_op *op);
    void *p[8];
    const int *ip;
    float *fp[2];
    int i[8];
    size_t n;
};

static double bench_time(bench_ctx *bc, bench_op *op) {
    const zt_backend *be = bc->be;
    op->run(be, op); /* warm-up (plans, scratch growth) */
    be->synchronize();
    double t0 = zt_now();
    op->run(be, op);
    be->synchronize();
    double one = zt_now() - t0;
    int iters = one > 0 ? (int)(bc->min_s / one) : 10;
    if (iters < 2) iters = 2;
    if (iters > 50) iters = 50;
    t0 = zt_now();
    for (int k = 0; k < iters; k++) op->run(be, op);
    be->synchronize();
    return (zt_now() - t0) / iters;
}

static void bench_report(const char *name, double s, double flops, double bytes) {
    if (flops > 0) printf("BENCH %-44s %9.3f ms %8.1f TFLOP/s\n", name, s * 1e3, flops / s * 1e-12);
    else printf("BENCH %-44s %9.3f ms %8.1f GB/s\n", name, s * 1e3, bytes / s * 1e-9);
    fflush(stdout);
}

static void run_mm_fwd(const zt_backend *be, bench_op *o) {
    be->matmul_forward(o->p[0], o->p[1], o->p[2], o->p[3], o->i[0], o->i[1], o->i[2], o->i[3], o->i[4]);
}
static void run_mm_bwd(const zt_backend *be, bench_op *o) {
    be->matmul_backward(o->p[4], o->p[5], o->p[6], o->p[0], o->p[1], o->p[2], o->i[0], o->i[1], o->i[2], o->i[3],
                        o->i[4]);
}
static void run_mm_fwd_gelu(const zt_backend *be, bench_op *o) {
    be->matmul_forward_gelu(o->p[0], o->p[7], o->p[1], o->p[2], o->p[3], o->i[0], o->i[1], o->i[2]);
}
static void run_mm_bwd_dgelu(const zt_backend *be, bench_op *o) {
    be->matmul_backward_dgelu(o->p[4], o->p[5], o->p[6], o->p[0], o->p[1], o->p[2], o->p[7], o->i[0], o->i[1], o->i[2]);
}
static void run_att_fwd(const zt_backend *be, bench_op *o) {
    be->attention_forward(o->p[0], o->p[1], o->p[2], o->i[0], o->i[1], o->i[2], o->i[3]);
}
static void run_att_bwd(const zt_backend *be, bench_op *o) {
    be->attention_backward(o->p[3], o->p[4], o->p[5], o->p[2], o->p[1], o->i[0], o->i[1], o->i[2], o->i[3]);
}
static void run_ln_fwd_b(const zt_backend *be, bench_op *o) {
    be->layernorm_forward(o->p[0], o->fp[0], o->fp[1], o->p[1], o->p[2], o->p[3], o->i[0], o->i[1]);
}
static void run_ln_bwd_b(const zt_backend *be, bench_op *o) {
    be->layernorm_backward(o->p[4], o->p[5], o->p[6], o->p[7], o->p[1], o->p[2], o->fp[0], o->fp[1], o->i[0], o->i[1]);
}
static void run_gelu_f(const zt_backend *be, bench_op *o) { be->gelu_forward(o->p[0], o->p[1], o->n); }
static void run_gelu_b(const zt_backend *be, bench_op *o) { be->gelu_backward(o->p[0], o->p[1], o->p[2], o->n); }
static void run_resid(const zt_backend *be, bench_op *o) { be->residual_forward(o->p[0], o->p[1], o->p[2], o->n); }
static void run_accum(const zt_backend *be, bench_op *o) { be->accumulate(o->p[0], o->p[1], o->n); }
static void run_xent_b(const zt_backend *be, bench_op *o) {
    be->softmax_xent(o->fp[0], o->p[0], o->p[0], o->ip, o->i[0], o->i[1], o->i[2], 1.0f / o->i[0]);
}
static void run_emb_f(const zt_backend *be, bench_op *o) {
    be->embedding_forward(o->p[0], o->ip, o->p[1], 0, o->i[3], o->p[2], o->i[0], o->i[1], o->i[2]);
}
static void run_emb_b(const zt_backend *be, bench_op *o) {
    be->embedding_backward(o->p[3], 0, o->i[3], o->p[4], o->p[0], o->ip, o->i[0], o->i[1], o->i[2]);
}
static void run_adam(const zt_backend *be, bench_op *o) {
    zt_adam_step s = {6e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
    be->adamw((float *)o->p[0], (float *)o->p[1], (float *)o->p[2], o->p[3], o->p[4], o->n, &s);
}

int zt_selftest_bench(const zt_backend *be, int B, int T) {
    const int C = 768, NH = 12, V = 50257, Vp = 50304, L = 12;
    int N = B * T;
    size_t es = zt_dtype_size(be->compute_dtype);
    bench_ctx bc = {be, 0.2};
    int small = be->memory_is_host; /* the cpu backend: smaller peak GEMM and optimizer */
    zt_rng rng;
    zt_rng_seed(&rng, 42);
    printf("selftest --bench: %s backend, GPT-2 124M shapes B=%d T=%d C=%d NH=%d V=%d (Vp %d)\n", be->name, B, T, C,
           NH, V, Vp);
    double step_fwd = 0, step_bwd = 0; /* estimated per-step seconds from the ops below */
    bench_op o;

    /* ---- GEMM peak: square bf16 product */
    {
        int M = small ? 1024 : 8192;
        void *a = bench_buf(&bc, (size_t)M * M, 1, &rng), *w = bench_buf(&bc, (size_t)M * M, 0.02f, &rng);
        void *out = st_alloc(be, (size_t)M * M * es);
        memset(&o, 0, sizeof o);
        o.run = run_mm_fwd, o.p[0] = out, o.p[1] = a, o.p[2] = w, o.i[0] = M, o.i[1] = M, o.i[2] = M, o.i[4] = M;
        double t = bench_time(&bc, &o);
        char name[64];
        snprintf(name, sizeof name, "gemm peak %d^3 (matmul_forward)", M);
        bench_report(name, t, 2.0 * M * M * M, 0);
        be->free(a), be->free(w), be->free(out);
    }
    /* ---- the model's GEMMs: name, C_in, C_out, count per step, transposed (LM head), and whether
     * the model fuses the GELU into this one's forward (fc, 1) or backward (fcproj, 2) */
    struct { const char *name; int cin, cout, per_step, wt, ld, bias, gelu; } mm[] = {
        {"qkv    N x 768 -> 2304", C, 3 * C, L, 0, 3 * C, 1, 0},
        {"attproj N x 768 -> 768", C, C, L, 0, C, 1, 0},
        {"fc     N x 768 -> 3072", C, 4 * C, L, 0, 4 * C, 1, 1},
        {"fcproj N x 3072 -> 768", 4 * C, C, L, 0, C, 1, 2},
        {"lmhead N x 768 -> 50257 (wte^T, ld 50304)", C, V, 1, 1, Vp, 0, 0},
    };
    for (size_t k = 0; k < sizeof mm / sizeof mm[0]; k++) {
        size_t nw = (size_t)mm[k].cin * mm[k].cout;
        void *inp = bench_buf(&bc, (size_t)N * mm[k].cin, 1, &rng), *w = bench_buf(&bc, nw, 0.02f, &rng);
        void *bias = mm[k].bias ? bench_buf(&bc, mm[k].cout, 0.02f, &rng) : NULL;
        void *out = bench_buf(&bc, (size_t)N * mm[k].ld, 0.1f, &rng);
        void *dinp = st_alloc(be, (size_t)N * mm[k].cin * es), *dw = st_alloc(be, nw * es);
        void *db = mm[k].bias ? st_alloc(be, mm[k].cout * es) : NULL;
        /* the pre-activation: fc's output before the GELU, or fcproj's input before it */
        void *pre = mm[k].gelu ? bench_buf(&bc, (size_t)N * (mm[k].gelu == 1 ? mm[k].cout : mm[k].cin), 1, &rng) : NULL;
        memset(&o, 0, sizeof o);
        o.p[0] = out, o.p[1] = inp, o.p[2] = w, o.p[3] = bias, o.p[4] = dinp, o.p[5] = dw, o.p[6] = db, o.p[7] = pre;
        o.i[0] = N, o.i[1] = mm[k].cin, o.i[2] = mm[k].cout, o.i[3] = mm[k].wt, o.i[4] = mm[k].ld;
        double fl = 2.0 * N * mm[k].cin * mm[k].cout;
        char name[96];
        o.run = mm[k].gelu == 1 ? run_mm_fwd_gelu : run_mm_fwd;
        double t = bench_time(&bc, &o);
        snprintf(name, sizeof name, "matmul_fwd%s %s", mm[k].gelu == 1 ? "+gelu" : "", mm[k].name);
        bench_report(name, t, fl, 0);
        step_fwd += t * mm[k].per_step;
        o.run = mm[k].gelu == 2 ? run_mm_bwd_dgelu : run_mm_bwd;
        t = bench_time(&bc, &o);
        snprintf(name, sizeof name, "matmul_bwd%s %s", mm[k].gelu == 2 ? "+dgelu" : "", mm[k].name);
        bench_report(name, t, 2 * fl, 0);
        step_bwd += t * mm[k].per_step;
        if (pre) be->free(pre);
        be->free(inp), be->free(w), be->free(out), be->free(dinp), be->free(dw);
        if (bias) be->free(bias), be->free(db);
    }
    /* ---- attention */
    {
        size_t natt = (size_t)B * NH * T * T;
        void *qkv = bench_buf(&bc, (size_t)N * 3 * C, 1, &rng), *out = st_alloc(be, (size_t)N * C * es);
        void *att = st_alloc(be, natt * es), *datt = st_alloc(be, natt * es);
        void *dqkv = st_alloc(be, (size_t)N * 3 * C * es), *dout = bench_buf(&bc, (size_t)N * C, 1, &rng);
        memset(&o, 0, sizeof o);
        o.p[0] = out, o.p[1] = att, o.p[2] = qkv, o.p[3] = dqkv, o.p[4] = datt, o.p[5] = dout;
        o.i[0] = B, o.i[1] = T, o.i[2] = C, o.i[3] = NH;
        double fl = 4.0 * B * NH * (double)T * T * (C / NH) * 0.5; /* causal: half of QK^T and PV */
        o.run = run_att_fwd;
        double t = bench_time(&bc, &o);
        bench_report("attention_forward (causal FLOPs)", t, fl, 0);
        step_fwd += t * L;
        o.run = run_att_bwd;
        t = bench_time(&bc, &o);
        bench_report("attention_backward (2.5x fwd FLOPs)", t, 2.5 * fl, 0);
        step_bwd += t * L;
        be->free(qkv), be->free(out), be->free(att), be->free(datt), be->free(dqkv), be->free(dout);
    }
    /* ---- memory-bound ops */
    {
        size_t NC = (size_t)N * C;
        void *x = bench_buf(&bc, NC, 1, &rng), *w = bench_buf(&bc, C, 0.1f, &rng), *b = bench_buf(&bc, C, 0.1f, &rng);
        void *y = st_alloc(be, NC * es), *dy = bench_buf(&bc, NC, 1, &rng), *dx = st_alloc(be, NC * es);
        void *dw = st_alloc(be, C * es), *db = st_alloc(be, C * es);
        float *mean = st_alloc(be, N * sizeof(float)), *rstd = st_alloc(be, N * sizeof(float));
        memset(&o, 0, sizeof o);
        o.p[0] = y, o.p[1] = x, o.p[2] = w, o.p[3] = b, o.p[4] = dx, o.p[5] = dw, o.p[6] = db, o.p[7] = dy;
        o.fp[0] = mean, o.fp[1] = rstd, o.i[0] = N, o.i[1] = C;
        o.run = run_ln_fwd_b;
        double t = bench_time(&bc, &o);
        bench_report("layernorm_forward N x 768", t, 0, 2.0 * NC * es);
        step_fwd += t * (2 * L + 1);
        o.run = run_ln_bwd_b;
        t = bench_time(&bc, &o);
        bench_report("layernorm_backward N x 768 (dx, dw, db)", t, 0, 4.0 * NC * es);
        step_bwd += t * (2 * L + 1);
        memset(&o, 0, sizeof o);
        o.p[0] = y, o.p[1] = x, o.p[2] = dy, o.n = NC;
        o.run = run_resid;
        t = bench_time(&bc, &o);
        bench_report("residual_forward N x 768", t, 0, 3.0 * NC * es);
        step_fwd += t * 2 * L;
        o.p[0] = dx, o.p[1] = dy, o.run = run_accum;
        t = bench_time(&bc, &o);
        bench_report("accumulate N x 768", t, 0, 3.0 * NC * es);
        step_bwd += t * 2 * L;
        be->free(x), be->free(w), be->free(b), be->free(y), be->free(dy), be->free(dx), be->free(dw), be->free(db);
        be->free(mean), be->free(rstd);

        size_t n4 = 4 * NC;
        void *h = bench_buf(&bc, n4, 1, &rng), *g = st_alloc(be, n4 * es), *dg = bench_buf(&bc, n4, 1, &rng);
        memset(&o, 0, sizeof o);
        o.p[0] = g, o.p[1] = h, o.p[2] = dg, o.n = n4;
        o.run = run_gelu_f;
        t = bench_time(&bc, &o);
        /* the model fuses both into the MLP's GEMMs (above): timed, not counted in the step */
        bench_report("gelu_forward N x 3072 (fused in the step)", t, 0, 2.0 * n4 * es);
        o.p[0] = dg, o.run = run_gelu_b; /* in place, as the engine may do */
        t = bench_time(&bc, &o);
        bench_report("gelu_backward N x 3072 (fused in the step)", t, 0, 3.0 * n4 * es);
        be->free(h), be->free(g), be->free(dg);
    }
    /* ---- softmax + cross-entropy, embedding */
    {
        size_t nl = (size_t)N * Vp;
        void *logits = bench_buf(&bc, nl, 2, &rng);
        int *tg = zt_xmalloc((size_t)N * sizeof(int));
        for (int i = 0; i < N; i++) tg[i] = (int)(zt_rng_u64(&rng) % (uint64_t)V);
        int *dt = st_up_i(be, tg, N);
        float *losses = st_alloc(be, (size_t)N * sizeof(float));
        memset(&o, 0, sizeof o);
        o.p[0] = logits, o.ip = dt, o.fp[0] = losses, o.i[0] = N, o.i[1] = V, o.i[2] = Vp;
        o.run = run_xent_b;
        double t = bench_time(&bc, &o);
        bench_report("softmax_xent N x 50304 (in place, read+write)", t, 0, 2.0 * nl * es);
        step_fwd += t;
        be->free(logits), be->free(losses);

        void *wte = bench_buf(&bc, (size_t)V * C, 0.02f, &rng), *wpe = bench_buf(&bc, (size_t)T * C, 0.02f, &rng);
        void *out = st_alloc(be, (size_t)N * C * es), *dwte = st_alloc(be, (size_t)V * C * es);
        void *dwpe = st_alloc(be, (size_t)T * C * es);
        memset(&o, 0, sizeof o);
        o.p[0] = out, o.p[1] = wte, o.p[2] = wpe, o.p[3] = dwte, o.p[4] = dwpe, o.ip = dt;
        o.i[0] = B, o.i[1] = T, o.i[2] = C, o.i[3] = V;
        o.run = run_emb_f;
        t = bench_time(&bc, &o);
        bench_report("embedding_forward N x 768", t, 0, 3.0 * N * C * es);
        step_fwd += t;
        o.run = run_emb_b;
        t = bench_time(&bc, &o);
        bench_report("embedding_backward N x 768 (sort + sums)", t, 0, 3.0 * N * C * es);
        step_bwd += t;
        be->free(wte), be->free(wpe), be->free(out), be->free(dwte), be->free(dwpe), be->free(dt);
        free(tg);
    }
    /* ---- optimizer over 124M parameters */
    double step_opt = 0;
    {
        size_t n = small ? ((size_t)1 << 22) : 124439808;
        float *p = st_alloc(be, n * 4), *m = st_alloc(be, n * 4), *v = st_alloc(be, n * 4);
        void *g = bench_buf(&bc, n, 0.01f, &rng), *po = st_alloc(be, n * es);
        memset(&o, 0, sizeof o);
        o.p[0] = p, o.p[1] = m, o.p[2] = v, o.p[3] = g, o.p[4] = po, o.n = n, o.run = run_adam;
        step_opt = bench_time(&bc, &o);
        bench_report("adamw (124M params; 4M on the cpu backend)", step_opt, 0, (double)n * (24 + 2 * es));
        if (small) step_opt *= 124439808.0 / (double)n;
        be->free(p), be->free(m), be->free(v), be->free(g), be->free(po);
    }
    double model_flops = 6.0 * 124439808.0 * N + 6.0 * L * (double)T * C * N; /* 6 P N + attention */
    double step = step_fwd + step_bwd + step_opt;
    printf("BENCH estimated step (sum of ops, no recompute): forward %.1f ms, backward %.1f ms, optimizer %.1f ms, "
           "total %.1f ms = %.0f tokens/s, %.1f TFLOP/s model FLOPs\n",
           step_fwd * 1e3, step_bwd * 1e3, step_opt * 1e3, step * 1e3, N / step, model_flops / step * 1e-12);
    return 0;
}

