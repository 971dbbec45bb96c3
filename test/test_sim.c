/* test_sim.c — the simulated GPU (src/backend/backend_sim.c) keeps the rules it exists to enforce.
 *
 * Ops: each op on the sim, in bf16 and fp16, equals — bit for bit — the CPU backend's fp32 op on the
 * widened 16-bit inputs with its outputs rounded to nearest-even (16-bit storage, fp32 math), with
 * accumulating outputs prefilled and aliased arguments (dlogits = logits, dinp = dout) as the
 * contracts allow. fp32 tensors (LayerNorm statistics, cross-entropy statistics, losses, Adam states)
 * stay fp32; the Llama family's ops (grouped-query attention, RMSNorm, rope and its inverse, SwiGLU)
 * likewise. The tiled linears' gemm, add_bias and bias_grad take strided slices: they touch
 * exactly the slice's elements, and the extent checked is the slice's own.
 * Memory: a separate space — a host read of a device buffer faults at once with one line naming
 * it; a host pointer handed to an op, an op running past its buffer, and a freed buffer are each
 * stopped with the op and argument named, and so is a thread that uses the table without calling
 * bind_thread first (each in a child process). Capacity: ZEROTRAIN_SIM_MEM is
 * what mem_info reports, an alloc past it returns NULL (as cudaMalloc fails), a free gives it back,
 * and alloc() is zero-filled. Order: work queued on the stream is complete before a copy to the host
 * returns, under jitter. */
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu_adam.h"
#include "check.h"

static const zt_backend *cpu, *sim;
static zt_dtype dt;

static uint64_t rng_state = 0x2545F4914F6CDD1Dull;
static float urand(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (float)((double)(rng_state >> 11) / (double)(1ull << 52) - 1.0);
}

/* A tensor on both sides: h = fp32 values exactly representable in dt (what the CPU op reads), d =
 * the same on the sim device. */
typedef struct {
    float *h;
    void *d;
    size_t n;
} pair;

static pair make(size_t n, float scale) {
    pair p = {calloc(n, sizeof(float)), sim->alloc(n * 2), n};
    uint16_t *raw = malloc(n * 2);
    for (size_t i = 0; i < n; i++) p.h[i] = urand() * scale;
    zt_cpu_from_f32(raw, p.h, n, dt);
    zt_cpu_to_f32(p.h, raw, n, dt); /* now exactly 16-bit values */
    sim->copy(p.d, raw, n * 2, ZT_H2D);
    free(raw);
    return p;
}

/* fp32 tensor on both sides */
static pair make32(size_t n, float scale) {
    pair p = {calloc(n, sizeof(float)), sim->alloc(n * 4), n};
    for (size_t i = 0; i < n; i++) p.h[i] = urand() * scale;
    sim->copy(p.d, p.h, n * 4, ZT_H2D);
    return p;
}

static void drop(pair p) {
    free(p.h);
    sim->free(p.d);
}

/* the sim's 16-bit result equals the CPU's fp32 result rounded, bit for bit; then the CPU side's
 * copy is rounded as well, as the next op reads it */
static int same16(const char *name, pair p) {
    uint16_t *got = malloc(p.n * 2), *want = malloc(p.n * 2);
    sim->copy(got, p.d, p.n * 2, ZT_D2H);
    zt_cpu_from_f32(want, p.h, p.n, dt);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < p.n; i++)
        if (got[i] != want[i] && !(isnan(p.h[i]))) { if (!bad++) first = i; }
    char full[128];
    snprintf(full, sizeof full, "%s_%s", name, dt == ZT_BF16 ? "bf16" : "fp16");
    int ok = CHECK(bad == 0, full, "%zu of %zu elements differ, first at %zu: 0x%04x vs 0x%04x", bad, p.n, first,
                   got[first], want[first]);
    zt_cpu_to_f32(p.h, want, p.n, dt); /* the CPU side goes on from the stored 16-bit values too */
    free(got);
    free(want);
    return ok;
}

static int same32(const char *name, pair p) {
    float *got = malloc(p.n * 4);
    sim->copy(got, p.d, p.n * 4, ZT_D2H);
    int ok = memcmp(got, p.h, p.n * 4) == 0;
    char full[128];
    snprintf(full, sizeof full, "%s_%s", name, dt == ZT_BF16 ? "bf16" : "fp16");
    CHECK(ok, full, "fp32 results differ");
    free(got);
    return ok;
}

/* Tiled linears' operands are slices: columns [lo, lo + cols) of a [rows, ld] matrix, ld = lo + cols +
 * pad, placed so that the slice's last element is its allocation's last (allocations are whole 256
 * bytes): an op that takes the slice to span rows * ld elements rather than (rows - 1) * ld + cols
 * runs past its buffer and is stopped. Every element outside the slice holds a signalling NaN: an op
 * must not read it (the result would be NaN) nor write it, not even by a round trip through fp32. */
typedef struct {
    pair p;
    size_t at; /* the slice's first element */
    int rows, cols, ld;
} slice;
static uint16_t snan16(void) { return dt == ZT_BF16 ? 0x7F81 : 0x7C01; }
static int in_slice(const slice *s, size_t e) {
    return e >= s->at && (e - s->at) / s->ld < (size_t)s->rows && (e - s->at) % s->ld < (size_t)s->cols;
}
static slice make_slice(int rows, int cols, int lo, int pad, float scale) {
    int ld = lo + cols + pad;
    size_t span = (size_t)(rows - 1) * ld + cols, n = (lo + span + 127) / 128 * 128;
    slice s = {make(n, scale), n - span, rows, cols, ld};
    uint16_t *raw = malloc(n * 2);
    zt_cpu_from_f32(raw, s.p.h, n, dt);
    for (size_t e = 0; e < n; e++)
        if (!in_slice(&s, e)) raw[e] = snan16(), s.p.h[e] = NAN;
    sim->copy(s.p.d, raw, n * 2, ZT_H2D);
    free(raw);
    return s;
}
static float *sh(slice s) { return s.p.h + s.at; }
static void *sd(slice s) { return (uint16_t *)s.p.d + s.at; }
/* the slice as same16 checks it, and every element around it still the signalling NaN */
static void same_slice(const char *name, slice s) {
    same16(name, s.p);
    uint16_t *raw = malloc(s.p.n * 2);
    sim->copy(raw, s.p.d, s.p.n * 2, ZT_D2H);
    size_t changed = 0;
    for (size_t e = 0; e < s.p.n; e++) changed += !in_slice(&s, e) && raw[e] != snan16();
    char full[160];
    snprintf(full, sizeof full, "%s_outside_untouched_%s", name, dt == ZT_BF16 ? "bf16" : "fp16");
    CHECK(changed == 0, full, "%zu elements outside the slice changed", changed);
    free(raw);
}
static void tiled_ops(void) {
    char name[96];
    for (int t = 0; t < 8; t++) { /* every (trans_a, trans_b), beta 0 and 1 */
        int ta = t & 1, tb = (t >> 1) & 1, acc = t >> 2, M = acc ? 6 : 5, N = acc ? 11 : 7, K = acc ? 8 : 9;
        slice a = make_slice(ta ? K : M, ta ? M : K, 3, 4, 1), b = make_slice(tb ? N : K, tb ? K : N, 2, 5, 1);
        slice c = make_slice(M, N, acc ? 1 : 4, 2, 1);
        cpu->gemm(sh(c), sh(a), sh(b), M, N, K, a.ld, b.ld, c.ld, ta, tb, (float)acc);
        sim->gemm(sd(c), sd(a), sd(b), M, N, K, a.ld, b.ld, c.ld, ta, tb, (float)acc);
        snprintf(name, sizeof name, "gemm%s%s_beta%d", ta ? "_trans_a" : "", tb ? "_trans_b" : "", acc);
        same_slice(name, c);
        drop(a.p), drop(b.p), drop(c.p);
    }
    int N = 9, OC = 21;
    slice out = make_slice(N, OC, 5, 3, 1), dout = make_slice(N, OC, 2, 6, 1);
    pair bias = make(OC, 1), dbias = make(OC, 1);
    cpu->add_bias(sh(out), bias.h, N, OC, out.ld);
    sim->add_bias(sd(out), bias.d, N, OC, out.ld);
    same_slice("add_bias", out);
    cpu->bias_grad(dbias.h, sh(dout), N, OC, dout.ld);
    sim->bias_grad(dbias.d, sd(dout), N, OC, dout.ld);
    same16("bias_grad", dbias);
    same_slice("bias_grad_dout", dout);
    drop(out.p), drop(dout.p), drop(bias), drop(dbias);
}

/* largest distance in 16-bit steps between two 16-bit tensors of one sign pattern (ulps) */
static int max_ulps(const uint16_t *a, const uint16_t *b, size_t n) {
    int worst = 0;
    for (size_t i = 0; i < n; i++) {
        int d = (a[i] & 0x8000) == (b[i] & 0x8000) ? abs((int)(a[i] & 0x7FFF) - (int)(b[i] & 0x7FFF)) : 1 << 16;
        if (d > worst) worst = d;
    }
    return worst;
}

/* The tiled forward as gpt2.c runs it (three row tiles into the fp32 accumulator, one rounding with
 * the bias) is within one 16-bit step of the untiled matmul_forward, element by element; summing the
 * tiles into the 16-bit output (a rounding per tile and one more for the bias) is not. */
static void tiled_forward_rounding(void) {
    enum { N = 32, IN = 96, OC = 40, TILE = 32 };
    pair in = make((size_t)N * IN, 1), w = make((size_t)IN * OC, 1), bias = make(OC, 1);
    void *untiled = sim->alloc((size_t)N * OC * 2), *tiled = sim->alloc((size_t)N * OC * 2),
         *per_tile = sim->alloc((size_t)N * OC * 2);
    float *acc = sim->alloc((size_t)N * OC * 4);
    sim->matmul_forward(untiled, in.d, w.d, bias.d, N, IN, OC, 0, OC);
    for (int k = 0; k < IN / TILE; k++) {
        const uint16_t *a = (const uint16_t *)in.d + k * TILE, *b = (const uint16_t *)w.d + (size_t)k * TILE * OC;
        sim->gemm_f32(acc, a, b, N, OC, TILE, IN, OC, OC, 0, 0, k ? 1.0f : 0.0f);
        sim->gemm(per_tile, a, b, N, OC, TILE, IN, OC, OC, 0, 0, k ? 1.0f : 0.0f);
    }
    sim->round_bias(tiled, acc, bias.d, N, OC, OC);
    sim->add_bias(per_tile, bias.d, N, OC, OC);
    uint16_t *u = malloc((size_t)N * OC * 2), *t = malloc((size_t)N * OC * 2), *p = malloc((size_t)N * OC * 2);
    sim->copy(u, untiled, (size_t)N * OC * 2, ZT_D2H);
    sim->copy(t, tiled, (size_t)N * OC * 2, ZT_D2H);
    sim->copy(p, per_tile, (size_t)N * OC * 2, ZT_D2H);
    int ulps = max_ulps(t, u, (size_t)N * OC), old = max_ulps(p, u, (size_t)N * OC);
    char name[96];
    snprintf(name, sizeof name, "tiled_forward_within_one_rounding_of_untiled_%s", dt == ZT_BF16 ? "bf16" : "fp16");
    CHECK(ulps <= 1, name, "%d steps apart (a rounding per tile: %d)", ulps, old);
    printf("tiled forward vs untiled (%s): %d step(s) apart; rounding per tile and bias: %d\n",
           dt == ZT_BF16 ? "bf16" : "fp16", ulps, old);
    free(u), free(t), free(p);
    sim->free(untiled), sim->free(tiled), sim->free(per_tile), sim->free(acc);
    drop(in), drop(w), drop(bias);
}

static void ops(void) {
    int B = 2, T = 8, C = 16, NH = 2, N = B * T, OC = 24, ld = 32, V = 40, Vp = 48;
    /* LayerNorm forward and backward (accumulating dinp, dw, db) */
    pair x = make((size_t)N * C, 2), w = make(C, 1), b = make(C, 1), out = make((size_t)N * C, 1);
    pair mean = make32(N, 0), rstd = make32(N, 0);
    cpu->layernorm_forward(out.h, mean.h, rstd.h, x.h, w.h, b.h, N, C);
    sim->layernorm_forward(out.d, mean.d, rstd.d, x.d, w.d, b.d, N, C);
    same16("layernorm_forward", out);
    same32("layernorm_forward_stats", mean);
    pair dx = make((size_t)N * C, 1), dw = make(C, 1), db = make(C, 1);
    cpu->layernorm_backward(dx.h, dw.h, db.h, out.h, x.h, w.h, mean.h, rstd.h, N, C);
    sim->layernorm_backward(dx.d, dw.d, db.d, out.d, x.d, w.d, mean.d, rstd.d, N, C);
    same16("layernorm_backward_dinp", dx);
    same16("layernorm_backward_dw", dw);
    /* matmul into a padded row stride, with bias; backward accumulating dW and dbias */
    pair W = make((size_t)C * OC, 0.5f), bias = make(OC, 0.5f), y = make((size_t)N * ld, 1);
    cpu->matmul_forward(y.h, x.h, W.h, bias.h, N, C, OC, 0, ld);
    sim->matmul_forward(y.d, x.d, W.d, bias.d, N, C, OC, 0, ld);
    same16("matmul_forward_padded", y);
    pair dW = make((size_t)C * OC, 1), dbias = make(OC, 1);
    cpu->matmul_backward(dx.h, dW.h, dbias.h, y.h, x.h, W.h, N, C, OC, 0, ld);
    sim->matmul_backward(dx.d, dW.d, dbias.d, y.d, x.d, W.d, N, C, OC, 0, ld);
    same16("matmul_backward_dinp", dx);
    same16("matmul_backward_dw", dW);
    same16("matmul_backward_dbias", dbias);
    /* attention: backward recomputes the probabilities the forward used */
    pair qkv = make((size_t)N * 3 * C, 1), att = make((size_t)B * NH * T * T, 0), ao = make((size_t)N * C, 0);
    float *att32 = calloc((size_t)B * NH * T * T, 4), *datt32 = calloc((size_t)B * NH * T * T, 4);
    cpu->attention_forward(ao.h, att32, qkv.h, B, T, C, NH);
    sim->attention_forward(ao.d, att.d, qkv.d, B, T, C, NH);
    same16("attention_forward", ao);
    pair dqkv = make((size_t)N * 3 * C, 1), datt = make((size_t)B * NH * T * T, 0);
    cpu->attention_backward(dqkv.h, datt32, out.h, qkv.h, att32, B, T, C, NH);
    sim->attention_backward(dqkv.d, datt.d, out.d, qkv.d, att.d, B, T, C, NH);
    same16("attention_backward", dqkv);
    free(att32);
    free(datt32);
    /* softmax + cross-entropy with dlogits aliasing logits; padding columns zeroed */
    pair logits = make((size_t)N * Vp, 3), losses = make32(N, 0);
    int *tg = malloc((size_t)N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = (i * 7) % V;
    int *tg_d = sim->alloc((size_t)N * sizeof(int));
    sim->copy(tg_d, tg, (size_t)N * sizeof(int), ZT_H2D);
    cpu->softmax_xent(losses.h, logits.h, logits.h, tg, N, V, Vp, 1.0f / N);
    sim->softmax_xent(losses.d, logits.d, logits.d, tg_d, N, V, Vp, 1.0f / N);
    same16("softmax_xent_dlogits_aliased", logits);
    same32("softmax_xent_losses", losses);
    /* vocabulary-parallel cross-entropy: two ranks' column parts [0, 24) and [24, 40) of V, each in
     * rows of stride Vp; stats fp32 in one [tp][3N] buffer (as after the all-gather); rank 0's dlogits
     * alias its logits, rank 1's go to a buffer of their own */
    enum { TP = 2 };
    int lo[TP] = {0, 24}, Vl[TP] = {24, V - 24};
    pair stats = make32(3 * (size_t)TP * N, 0), part[TP], plosses[TP], dl1 = make((size_t)N * Vp, 1);
    for (int r = 0; r < TP; r++) {
        part[r] = make((size_t)N * Vp, 3);
        plosses[r] = make32(N, 0);
        cpu->xent_partial(stats.h + 3 * (size_t)r * N, part[r].h, tg, N, Vl[r], Vp, lo[r]);
        sim->xent_partial((float *)stats.d + 3 * (size_t)r * N, part[r].d, tg_d, N, Vl[r], Vp, lo[r]);
    }
    same32("xent_partial_stats", stats);
    cpu->xent_parallel(plosses[0].h, part[0].h, part[0].h, tg, stats.h, TP, N, Vl[0], Vp, lo[0], 1.0f / N);
    sim->xent_parallel(plosses[0].d, part[0].d, part[0].d, tg_d, stats.d, TP, N, Vl[0], Vp, lo[0], 1.0f / N);
    cpu->xent_parallel(plosses[1].h, dl1.h, part[1].h, tg, stats.h, TP, N, Vl[1], Vp, lo[1], 1.0f / N);
    sim->xent_parallel(plosses[1].d, dl1.d, part[1].d, tg_d, stats.d, TP, N, Vl[1], Vp, lo[1], 1.0f / N);
    same16("xent_parallel_dlogits_aliased", part[0]);
    same16("xent_parallel_dlogits", dl1);
    same32("xent_parallel_losses_rank0", plosses[0]);
    same32("xent_parallel_losses_rank1", plosses[1]);
    /* embedding over a block of vocabulary rows [8, 24), wpe with it */
    pair wte = make((size_t)16 * C, 1), wpe = make((size_t)T * C, 1), emb = make((size_t)N * C, 1);
    cpu->embedding_forward(emb.h, tg, wte.h, 8, 24, wpe.h, B, T, C);
    sim->embedding_forward(emb.d, tg_d, wte.d, 8, 24, wpe.d, B, T, C);
    same16("embedding_forward_row_block", emb);
    /* GELU backward in place (dinp aliases dout), residual, accumulate, scale */
    pair g = make((size_t)N * C, 2);
    cpu->gelu_backward(out.h, g.h, out.h, (size_t)N * C);
    sim->gelu_backward(out.d, g.d, out.d, (size_t)N * C);
    same16("gelu_backward_aliased", out);
    cpu->residual_forward(g.h, g.h, x.h, (size_t)N * C);
    sim->residual_forward(g.d, g.d, x.d, (size_t)N * C);
    same16("residual_forward", g);
    cpu->scale(g.h, 0.37f, (size_t)N * C);
    sim->scale(g.d, 0.37f, (size_t)N * C);
    same16("scale", g);
    /* sumsq of the 16-bit values (a host value: waits for the stream) */
    double s_cpu = cpu->sumsq(g.h, (size_t)N * C), s_sim = sim->sumsq(g.d, (size_t)N * C);
    char name[64];
    snprintf(name, sizeof name, "sumsq_%s", dt == ZT_BF16 ? "bf16" : "fp16");
    CHECK(s_cpu == s_sim, name, "%.17g vs %.17g", s_sim, s_cpu);
    /* AdamW: fp32 master and moments, 16-bit gradients in, 16-bit parameters out */
    size_t n = 1000;
    pair master = make32(n, 1), m = make32(n, 0.01f), v = make32(n, 0.01f), grad = make(n, 1), pout = make(n, 0);
    for (size_t i = 0; i < n; i++) v.h[i] = fabsf(v.h[i]);
    sim->copy(v.d, v.h, n * 4, ZT_H2D);
    zt_adam_step st = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.1f, 0.05f, 1.0f};
    zt_cpu_adamw(master.h, m.h, v.h, grad.h, n, &st, NULL, ZT_F32, 1);
    memcpy(pout.h, master.h, n * 4);
    sim->adamw(master.d, m.d, v.d, grad.d, pout.d, n, &st);
    st.lr = 1e9f; /* the op copied the step when it was queued */
    same32("adamw_master", master);
    same32("adamw_v", v);
    same16("adamw_params_out", pout);
    pair all[] = {x, w, b, out, mean, rstd, dx, dw, db, W, bias, y, dW, dbias, qkv, att, ao, dqkv, datt, logits,
                  losses, stats, part[0], part[1], plosses[0], plosses[1], dl1, wte, wpe, emb, g, master, m, v, grad,
                  pout};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) drop(all[i]);
    sim->free(tg_d);
    free(tg);
}

/* the Llama family's ops: each equal to the CPU's fp32 op on the widened inputs, rounded once */
static void llama_ops(void) {
    int B = 2, T = 8, NH = 4, NKV = 2, HD = 8, N = B * T, C = 24, FF = 20, W = (NH + 2 * NKV) * HD;
    /* every entry filled (the ops and the rest) */
    const void *const *slot = (const void *const *)&sim->alloc;
    int n_entries = (int)((sizeof(zt_backend) - offsetof(zt_backend, alloc)) / sizeof(void *)), filled = 1;
    for (int i = 0; i < n_entries; i++) filled &= slot[i] != NULL;
    CHECK(filled, dt == ZT_BF16 ? "sim_bf16_every_entry_non_null" : "sim_fp16_every_entry_non_null", "a NULL entry");
    /* RMSNorm forward, backward accumulating dinp and dw */
    pair x = make((size_t)N * C, 2), w = make(C, 1), out = make((size_t)N * C, 1), rstd = make32(N, 0);
    cpu->rmsnorm_forward(out.h, rstd.h, x.h, w.h, 1e-5f, N, C);
    sim->rmsnorm_forward(out.d, rstd.d, x.d, w.d, 1e-5f, N, C);
    same16("rmsnorm_forward", out);
    same32("rmsnorm_forward_rstd", rstd);
    pair dx = make((size_t)N * C, 1), dw = make(C, 1);
    cpu->rmsnorm_backward(dx.h, dw.h, out.h, x.h, w.h, rstd.h, N, C);
    sim->rmsnorm_backward(dx.d, dw.d, out.d, x.d, w.d, rstd.d, N, C);
    same16("rmsnorm_backward_dinp", dx);
    same16("rmsnorm_backward_dw", dw);
    /* rope forward, then its inverse, on q|k|v rows (v must come back as it was) */
    pair qkv = make((size_t)N * W, 2), cs = make32((size_t)T * HD, 1);
    cpu->rope(qkv.h, cs.h, B, T, NH, NKV, HD, 0);
    sim->rope(qkv.d, cs.d, B, T, NH, NKV, HD, 0);
    same16("rope_forward", qkv);
    cpu->rope(qkv.h, cs.h, B, T, NH, NKV, HD, 1);
    sim->rope(qkv.d, cs.d, B, T, NH, NKV, HD, 1);
    same16("rope_inverse", qkv);
    /* grouped-query attention: backward recomputes the probabilities the forward used */
    pair att = make((size_t)B * NH * T * T, 0), ao = make((size_t)N * NH * HD, 0), g = make((size_t)N * NH * HD, 1);
    float *att32 = calloc((size_t)B * NH * T * T, 4), *datt32 = calloc((size_t)B * NH * T * T, 4);
    cpu->attention_gqa_forward(ao.h, att32, qkv.h, B, T, NH, NKV, HD);
    sim->attention_gqa_forward(ao.d, att.d, qkv.d, B, T, NH, NKV, HD);
    same16("attention_gqa_forward", ao);
    pair dqkv = make((size_t)N * W, 1), datt = make((size_t)B * NH * T * T, 0);
    cpu->attention_gqa_backward(dqkv.h, datt32, g.h, qkv.h, att32, B, T, NH, NKV, HD);
    sim->attention_gqa_backward(dqkv.d, datt.d, g.d, qkv.d, att.d, B, T, NH, NKV, HD);
    same16("attention_gqa_backward", dqkv);
    free(att32);
    free(datt32);
    /* SwiGLU forward and backward (overwrites) */
    pair gu = make((size_t)N * 2 * FF, 4), so = make((size_t)N * FF, 0), sd = make((size_t)N * FF, 1);
    pair dgu = make((size_t)N * 2 * FF, 1);
    cpu->swiglu_forward(so.h, gu.h, N, FF);
    sim->swiglu_forward(so.d, gu.d, N, FF);
    same16("swiglu_forward", so);
    cpu->swiglu_backward(dgu.h, gu.h, sd.h, N, FF);
    sim->swiglu_backward(dgu.d, gu.d, sd.d, N, FF);
    same16("swiglu_backward", dgu);
    pair all[] = {x, w, out, rstd, dx, dw, qkv, cs, att, ao, g, dqkv, datt, gu, so, sd, dgu};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) drop(all[i]);
}

/* runs fn in a child with stderr captured; returns its stderr and how it ended */
static char *in_child(void (*fn)(void *), void *arg, int *status) {
    int fd[2];
    if (pipe(fd)) return NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        dup2(fd[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fd[1]);
    static char buf[8192];
    size_t got = 0;
    ssize_t r;
    while (got < sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - got)) > 0) got += (size_t)r;
    buf[got] = 0;
    close(fd[0]);
    waitpid(pid, status, 0);
    return buf;
}

static void host_read(void *p) { printf("%d\n", *(volatile char *)p); }
static void host_pointer_to_op(void *p) {
    float host[64];
    sim->scale(host, 2.0f, 64);
}
static void past_the_end(void *p) { sim->scale(p, 2.0f, 1000); } /* p holds 64 elements */
static void freed(void *p) {
    void *q = sim->alloc(4096);
    sim->free(q);
    sim->scale(q, 2.0f, 16);
}

/* the asynchronous copies with a pageable host end (malloc, not host_alloc): each stops the run */
static void pageable_copy(void *p, int which) {
    char *h = calloc(1, 256);
    if (which == 0) sim->copy_async(p, h, 128, ZT_H2D);
    if (which == 1) sim->copy_ahead(h, p, 128, ZT_D2H);
    if (which == 2) sim->transfer(h, p, 128, ZT_D2H);
    sim->synchronize();
}
static void pageable_copy_async(void *p) { pageable_copy(p, 0); }
static void pageable_copy_ahead(void *p) { pageable_copy(p, 1); }
static void pageable_transfer(void *p) { pageable_copy(p, 2); }
/* the same from host_alloc, and a blocking copy from malloc: they run */
static void pinned_copies(void *p) {
    char *h = sim->host_alloc(256), *m = calloc(1, 256);
    sim->copy_async(p, h, 128, ZT_H2D);
    sim->copy_ahead(h + 128, p, 128, ZT_D2H);
    sim->transfer(h, p, 128, ZT_D2H);
    sim->copy(m, p, 128, ZT_D2H);
    sim->synchronize();
    sim->host_free(h);
    free(m);
}

/* pinned memory released with free(), as ratio auto's calibration once did (it crashed on a GPU) */
static void pinned_freed_with_free(void *p) {
    void *h = sim->host_alloc(4096);
    free(h);
}

static void *unbound_thread_main(void *p) {
    sim->scale(p, 2.0f, 16);
    return NULL;
}
static void unbound_thread(void *p) {
    pthread_t t;
    pthread_create(&t, NULL, unbound_thread_main, p);
    pthread_join(t, NULL);
}
static void *bound_thread_main(void *p) {
    zt_backend_bind_thread(sim);
    sim->scale(p, 2.0f, 16);
    sim->synchronize();
    return NULL;
}

static void faults(void) {
    void *buf = sim->alloc(128);
    int st = 0;
    char *err = in_child(host_read, buf, &st);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV && strstr(err, "host access to device memory"),
          "host_read_of_device_buffer_faults", "status %d, stderr: %.300s", st, err);
    err = in_child(host_pointer_to_op, NULL, &st);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(err, "scale: arg 1 = ") && strstr(err, "is host memory"),
          "host_pointer_to_op_stops", "status %d, stderr: %.300s", st, err);
    err = in_child(past_the_end, buf, &st);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(err, "runs past its buffer"), "op_past_its_buffer_stops",
          "status %d, stderr: %.300s", st, err);
    err = in_child(unbound_thread, buf, &st);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(err, "did not call bind_thread"),
          "thread_without_bind_thread_stops", "status %d, stderr: %.300s", st, err);
    pthread_t t;
    pthread_create(&t, NULL, bound_thread_main, buf);
    pthread_join(t, NULL);
    CHECK(1, "thread_with_bind_thread_runs", "");
    void (*pageable[3])(void *) = {pageable_copy_async, pageable_copy_ahead, pageable_transfer};
    static const char *const pageable_names[3] = {"copy_async", "copy_ahead", "transfer"};
    for (int k = 0; k < 3; k++) {
        char name[96], want[64];
        snprintf(name, sizeof name, "%s_from_pageable_memory_stops", pageable_names[k]);
        snprintf(want, sizeof want, "%s: ", pageable_names[k]);
        err = in_child(pageable[k], buf, &st);
        CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(err, want) && strstr(err, "not from host_alloc"), name,
              "status %d, stderr: %.300s", st, err);
    }
    pinned_copies(buf); /* here, not in a child: a forked child has no lane threads */
    CHECK(1, "async_copies_from_host_alloc_run", "");
    err = in_child(pinned_freed_with_free, NULL, &st);
    CHECK(WIFSIGNALED(st) && strstr(err, "is host_alloc's (pinned) memory, released with free()"),
          "host_alloc_buffer_freed_with_free_stops", "status %d, stderr: %.300s", st, err);
    err = in_child(freed, NULL, &st);
    CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 0) && strstr(err, "freed device memory"), "op_on_freed_buffer_stops",
          "status %d, stderr: %.300s", st, err);
    sim->free(buf);
}

static void memory(void) {
    size_t free0, total;
    sim->mem_info(&free0, &total);
    CHECK(total == (size_t)64 << 20, "mem_info_reports_ZEROTRAIN_SIM_MEM", "total %zu", total);
    void *big = sim->alloc((size_t)48 << 20), *too_much = sim->alloc((size_t)32 << 20);
    CHECK(big && !too_much, "alloc_past_capacity_returns_null", "big %p, past capacity %p", big, too_much);
    size_t free1;
    sim->mem_info(&free1, &total);
    CHECK(free0 - free1 == (size_t)48 << 20, "mem_info_counts_allocations", "free %zu -> %zu", free0, free1);
    sim->scale(big, 1.0f, 16); /* dirty a page, then give it back */
    sim->memset_zero(big, 4096);
    float one = 1.0f;
    float *f32 = sim->alloc(4);
    sim->copy(f32, &one, 4, ZT_H2D);
    sim->free(f32);
    sim->free(big);
    sim->mem_info(&free1, &total);
    void *again = sim->alloc((size_t)60 << 20);
    uint16_t *back = malloc((size_t)1 << 20);
    sim->copy(back, again, (size_t)1 << 20, ZT_D2H);
    size_t nonzero = 0;
    for (size_t i = 0; i < ((size_t)1 << 19); i++) nonzero += back[i] != 0;
    CHECK(free1 == free0 && again && nonzero == 0, "free_returns_memory_and_alloc_is_zeroed",
          "free %zu vs %zu, nonzero %zu", free1, free0, nonzero);
    free(back);
    sim->free(again);
}

/* a long chain of queued ops, then one copy to the host: it sees all of them */
static void ordering(void) {
    size_t n = 1 << 16;
    float *h = malloc(n * 4), *back = malloc(n * 4);
    for (size_t i = 0; i < n; i++) h[i] = 1.0f;
    float *d32 = sim->alloc(n * 4);
    void *d = sim->alloc(n * 2);
    sim->copy(d32, h, n * 4, ZT_H2D);
    sim->to_compute(d, d32, n);
    for (int k = 0; k < 50; k++) sim->accumulate(d, d, n); /* 2^50 in exact powers of two, then inf in fp16 */
    sim->scale(d, 0.0f, n);
    sim->accumulate(d, d, n);
    sim->to_f32(d32, d, n);
    sim->copy(back, d32, n * 4, ZT_D2H);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !(back[i] == 0.0f || isnan(back[i]));
    int want_nan = dt == ZT_F16; /* inf * 0 */
    CHECK(bad == 0 && (want_nan ? isnan(back[0]) : back[0] == 0.0f), dt == ZT_BF16 ? "queued_work_in_order_bf16" : "queued_work_in_order_fp16",
          "%zu wrong, back[0] = %g", bad, back[0]);
    sim->free(d);
    sim->free(d32);
    free(h);
    free(back);
}

/* n twos on the host (h, and back to read results into), on the device in fp32 (d32) and, in the
 * compute dtype, scaled to 2^11 by ten queued ops (a), and a second device buffer (b) */
typedef struct {
    float *h, *back, *d32;
    void *a, *b;
} twos;
static twos twos_on_device(size_t n) {
    twos t = {malloc(n * 4), malloc(n * 4), sim->alloc(n * 4), sim->alloc(n * 2), sim->alloc(n * 2)};
    for (size_t i = 0; i < n; i++) t.h[i] = 2.0f;
    sim->copy(t.d32, t.h, n * 4, ZT_H2D);
    sim->to_compute(t.a, t.d32, n);
    for (int k = 0; k < 10; k++) sim->scale(t.a, 2.0f, n); /* a = 2^11 once the stream gets there */
    return t;
}
static void twos_free(twos t) {
    sim->free(t.a);
    sim->free(t.b);
    sim->free(t.d32);
    free(t.h);
    free(t.back);
}

/* a mark is a point on the stream: wait_mark returns once the work queued before it has run (and not
 * the work after), so a transfer on another lane then reads its results; the twin-flow D2H lane waits
 * this way for one bucket's gradients while backward goes on (jitter widens every window) */
static void marks(void) {
    size_t n = 1 << 14;
    twos t = twos_on_device(n);
    float *back = t.back, *d32 = t.d32;
    void *a = t.a, *b = t.b;
    sim->to_compute(b, d32, n);
    unsigned long long m = sim->mark();
    for (int k = 0; k < 40; k++) sim->scale(b, 1.0f, n); /* later work: the wait does not include it */
    sim->wait_mark(m);
    uint16_t *staged = sim->host_alloc(n * 2);
    sim->transfer(staged, a, n * 2, ZT_D2H); /* its own lane: ordered only by the wait */
    zt_cpu_to_f32(back, staged, n, dt);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += back[i] != 2048.0f;
    CHECK(bad == 0, dt == ZT_BF16 ? "wait_mark_orders_a_transfer_bf16" : "wait_mark_orders_a_transfer_fp16",
          "%zu of %zu wrong, back[0] = %g", bad, n, back[0]);
    sim->synchronize();
    sim->host_free(staged);
    twos_free(t);
}

/* copy_ahead runs after the compute work queued before it, on its own lane; the compute work queued
 * after wait_ahead runs after it (jitter widens every window) */
static void ahead(void) {
    size_t n = 1 << 14;
    twos t = twos_on_device(n);
    float *back = t.back, *d32 = t.d32;
    void *a = t.a, *b = t.b;
    float *staged = sim->host_alloc(n * 2);
    sim->copy_ahead(staged, a, n * 2, ZT_D2H);   /* after the scales */
    sim->copy_ahead(b, staged, n * 2, ZT_H2D);   /* after that, on the same lane */
    sim->wait_ahead();
    sim->accumulate(b, b, n);                     /* 2^12, only once b has landed */
    sim->to_f32(d32, b, n);
    sim->copy(back, d32, n * 4, ZT_D2H);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += back[i] != 0x1p12f;
    CHECK(bad == 0, dt == ZT_BF16 ? "copy_ahead_ordered_bf16" : "copy_ahead_ordered_fp16", "%zu wrong, back[0] = %g", bad,
          back[0]);
    /* the host reads a copy_ahead's host buffer after synchronize() alone (backend.h): synchronize
     * covers the side lane too, though nothing waited for it on the device */
    uint16_t *landed = sim->host_alloc(n * 2);
    size_t late = 0;
    for (int round = 0; round < 8; round++) {
        sim->memset_zero(a, n * 2);
        sim->copy_ahead(landed, b, n * 2, ZT_D2H); /* b holds 2^12 */
        sim->synchronize();
        for (size_t i = 0; i < n; i++) late += landed[i] == 0;
        memset(landed, 0, n * 2);
    }
    CHECK(late == 0, dt == ZT_BF16 ? "synchronize_covers_copy_ahead_bf16" : "synchronize_covers_copy_ahead_fp16",
          "%zu elements not yet landed after synchronize()", late);
    sim->host_free(landed);
    sim->host_free(staged);
    twos_free(t);
}

/* Items reported after the fact (backend.h: zt_device_defer, the CUDA backend's event timing): none
 * reaches the observer before zt_device_report_deferred, then each does once, in start order. */
typedef struct { int n; double t0[8]; size_t bytes; } seen_items;
static void seen_transfer(void *ctx, zt_copy_kind kind, size_t bytes, int stream, double t0, double t1) {
    seen_items *s = ctx;
    if (s->n < 8) s->t0[s->n] = t0;
    s->n++, s->bytes += bytes;
}
static void seen_compute(void *ctx, double t0, double t1) {
    seen_items *s = ctx;
    if (s->n < 8) s->t0[s->n] = t0;
    s->n++;
}
static void deferred_reports(void) {
    seen_items s = {0};
    zt_device_observer obs = {.ctx = &s, .transfer = seen_transfer, .compute = seen_compute};
    zt_device_observe(&obs);
    zt_device_item a = {.is_copy = 1, .kind = ZT_H2D, .bytes = 100, .stream = ZT_STREAM_H2D, .t0 = 3, .t1 = 4};
    zt_device_item b = {.is_copy = 0, .t0 = 1, .t1 = 2};
    zt_device_item c = {.is_copy = 1, .kind = ZT_D2H, .bytes = 20, .stream = ZT_STREAM_D2H, .t0 = 2, .t1 = 5};
    zt_device_defer(&a), zt_device_defer(&b), zt_device_defer(&c);
    CHECK(s.n == 0, "deferred_items_wait_for_the_report", "%d reported early", s.n);
    zt_device_report_deferred();
    CHECK(s.n == 3 && s.bytes == 120 && s.t0[0] == 1 && s.t0[1] == 2 && s.t0[2] == 3, "deferred_items_reported_once_in_start_order",
          "%d items, %zu bytes, starts %g %g %g", s.n, s.bytes, s.t0[0], s.t0[1], s.t0[2]);
    zt_device_report_deferred();
    CHECK(s.n == 3, "deferred_items_not_reported_twice", "%d items", s.n);
    zt_device_observe(NULL);
}

int main(void) {
    setenv("ZEROTRAIN_SIM_MEM", "64MiB", 1);
    setenv("ZEROTRAIN_SIM_JITTER", "5", 1);
    cpu = zt_backend_cpu();
    const char *why = NULL;
    for (int k = 0; k < 2; k++) {
        dt = k ? ZT_F16 : ZT_BF16;
        sim = zt_backend_sim(dt, &why);
        if (!CHECK(sim != NULL, k ? "sim_fp16_starts" : "sim_bf16_starts", "%s", why ? why : "")) return 1;
        CHECK(sim->compute_dtype == dt && !sim->memory_is_host, k ? "sim_fp16_table" : "sim_bf16_table", "dtype %d",
              sim->compute_dtype);
        ops();
        llama_ops();
        tiled_ops();
        tiled_forward_rounding();
        ordering();
        marks();
        ahead();
    }
    memory();
    deferred_reports();
    faults();
    return zt_check_exit();
}
