/* test_model.c — whole-model checks on a tiny GPT-2 (CPU backend, one rank):
 *  - parameter table: HF names, Conv1D shapes, contiguous offsets, segments
 *  - gradient of the mean loss against central finite differences on sampled coordinates
 *  - activation checkpointing (every block, and number_checkpoints 2) gives bit-identical
 *    gradients and loss to keeping all activations
 *  - the same seed gives bit-identical parameters and gradients run to run */
#include <math.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#include "model/gpt2.h"
#include "comm/comm.h"
#include "engine/engine_internal.h" /* white-box: the engine's own buffers */
#include "check.h"

enum { B = 2, T = 8 };
static const zt_gpt2_shape SHAPE = {.n_layer = 3, .n_head = 2, .n_embd = 16, .vocab_size = 97, .n_positions = 16, .padded_vocab = 128};

typedef struct { zt_engine e; zt_gpt2 m; zt_param_source src; zt_param_table table; } rig;

static void rig_open(rig *r, zt_comm *comm, const float *init, int recompute, int nckpt) {
    zt_err err;
    zt_gpt2_param_table(&r->table, &SHAPE, &err);
    zt_engine_opts eo = {0, 0, 5e8, 1e5, 0.9f, 0.95f, 1e-8f, 0.0f, 0, 0, 5e7, 0, 0, NULL};
    zt_engine_create(&r->e, zt_backend_cpu(), comm, &r->table, &eo, init, &err);
    zt_gpt2_create(&r->m, zt_backend_cpu(), &SHAPE, &r->table, NULL, B, T, (zt_act_ckpt){.enabled = recompute, .number_checkpoints = nckpt}, &err);
    r->src = zt_engine_param_source(&r->e);
}

static void rig_close(rig *r) {
    zt_gpt2_destroy(&r->m);
    zt_engine_destroy(&r->e);
    zt_param_table_free(&r->table);
}

/* loss and (optionally) gradient of the mean loss */
static float loss_and_grads(rig *r, const int *in, const int *tg, float *grads) {
    zt_engine_begin_micro(&r->e, 1, 1);
    float loss = zt_gpt2_forward(&r->m, &r->src, in, tg, grads ? 1.0f / (B * T) : 0.0f);
    if (grads) {
        zt_gpt2_backward(&r->m, &r->src);
        memcpy(grads, r->e.grads_full, r->table.total * sizeof(float));
    }
    return loss;
}

/* the RNG jump must land where that many sequential draws do */
static void check_rng_jump(void) {
    const uint64_t jumps[] = {0, 1, 2, 63, 64, 1000, 123457};
    int ok = 1;
    for (size_t j = 0; j < sizeof jumps / sizeof jumps[0]; j++) {
        zt_rng a, b;
        zt_rng_seed(&a, 99), zt_rng_seed(&b, 99);
        for (uint64_t k = 0; k < jumps[j]; k++) zt_rng_u64(&a);
        zt_rng_jump(&b, jumps[j]);
        ok &= zt_rng_u64(&a) == zt_rng_u64(&b);
    }
    CHECK(ok, "rng_jump_equals_sequential_draws", "a jump landed elsewhere");
}

/* The threaded init (pieces of 2^20 values, each from a jumped RNG) equals one sequential stream
 * in parameter order: wte of V 50257 x C 32 spans two pieces. */
static void check_init_matches_sequential(void) {
    zt_gpt2_shape shape = {.n_layer = 1, .n_head = 2, .n_embd = 32, .vocab_size = 50257, .n_positions = 64, .padded_vocab = 50304};
    zt_param_table t;
    zt_err err = {{0}};
    if (zt_gpt2_param_table(&t, &shape, &err)) {
        CHECK(0, "init_threaded_equals_sequential", "%s", err.msg);
        return;
    }
    float *got = malloc(t.total * 4), *want = malloc(t.total * 4);
    zt_gpt2_init(&t, &shape, got, 5);
    zt_rng rng;
    zt_rng_seed(&rng, 5);
    for (int i = 0; i < t.count; i++) {
        const zt_param_info *p = &t.params[i];
        const char *leaf = strrchr(p->name, '.') + 1;
        float sd = strstr(p->name, "c_proj.weight") ? 0.02f / sqrtf(2.0f) : 0.02f;
        for (size_t k = 0; k < p->numel; k++)
            want[p->offset + k] = !strcmp(leaf, "bias") ? 0.0f : strstr(p->name, "ln_") ? 1.0f : sd * zt_rng_normal(&rng);
    }
    CHECK(memcmp(got, want, t.total * 4) == 0, "init_threaded_equals_sequential", "values differ");
    free(got), free(want);
    zt_param_table_free(&t);
}

/* The engine fills its parts from ranges of the init (zt_gpt2_init_range), chunk by chunk: ranges of
 * an odd length that cut tensors, rows and the threads' pieces give the whole init's values, and a
 * tensor-parallel rank's ranges give its part of them (rows, column pieces, wte's padding rows). */
static void check_init_ranges_match_whole(void) {
    zt_gpt2_shape shape = {.n_layer = 2, .n_head = 2, .n_embd = 32, .vocab_size = 50257, .n_positions = 64, .padded_vocab = 50304};
    zt_param_table whole, part;
    zt_err err = {{0}};
    if (zt_gpt2_param_table(&whole, &shape, &err)) {
        CHECK(0, "init_ranges_equal_whole_init", "%s", err.msg);
        return;
    }
    float *want = malloc(whole.total * 4), *got = malloc(whole.total * 4);
    zt_gpt2_init(&whole, &shape, want, 7);
    const size_t odd = 777777;
    for (size_t a = 0; a < whole.total; a += odd)
        zt_gpt2_init_range(&whole, &shape, 7, a, whole.total - a < odd ? whole.total - a : odd, got + a);
    CHECK(memcmp(got, want, whole.total * 4) == 0, "init_ranges_equal_whole_init", "values differ");
    int ok = 1;
    for (int r = 0; r < 2 && ok; r++) {
        zt_gpt2_param_table_tp(&part, &shape, r, 2, &err);
        float *take = malloc(part.total * 4), *ranged = malloc(part.total * 4);
        zt_tp_take_vector(&part, &whole, want, take);
        for (size_t a = 0; a < part.total; a += 1001)
            zt_gpt2_init_range(&part, &shape, 7, a, part.total - a < 1001 ? part.total - a : 1001, ranged + a);
        ok = memcmp(take, ranged, part.total * 4) == 0;
        free(take), free(ranged);
        zt_param_table_free(&part);
    }
    CHECK(ok, "init_ranges_of_a_tp_rank_equal_its_part_of_the_whole_init", "values differ");
    free(got), free(want);
    zt_param_table_free(&whole);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    zt_err err;
    zt_comm *comm = zt_comm_mpi(NULL, &err);
    zt_param_table table;
    zt_gpt2_param_table(&table, &SHAPE, &err);

    /* table */
    const zt_param_info *qkv = &table.params[2 + 2];
    CHECK(!strcmp(table.params[0].name, "transformer.wte.weight") && table.params[0].shape[0] == 97 &&
              table.params[0].shape[1] == 16, "table_wte", "%s", table.params[0].name);
    CHECK(!strcmp(qkv->name, "transformer.h.0.attn.c_attn.weight") && qkv->shape[0] == 16 && qkv->shape[1] == 48,
          "table_conv1d_layout", "%s [%d,%d]", qkv->name, qkv->shape[0], qkv->shape[1]);
    size_t expect = 97 * 16 + 16 * 16 + 3 * (12 * 16 * 16 + 13 * 16) + 2 * 16;
    CHECK(table.total == expect, "table_total", "%zu != %zu", table.total, expect);
    int contiguous = 1;
    for (int i = 1; i < table.count; i++)
        contiguous &= table.params[i].offset == table.params[i - 1].offset + table.params[i - 1].numel;
    CHECK(contiguous && table.segment_lo[table.n_segments] == table.total, "table_contiguous_segments", "gaps");
    CHECK(!strcmp(table.params[table.count - 1].name, "transformer.ln_f.bias"), "table_last", "%s",
          table.params[table.count - 1].name);

    float *init = malloc(table.total * sizeof *init);
    zt_gpt2_init(&table, &SHAPE, init, 42);
    int in[B * T], tg[B * T];
    zt_rng rng;
    zt_rng_seed(&rng, 7);
    for (int i = 0; i < B * T; i++) in[i] = (int)(zt_rng_u64(&rng) % 97), tg[i] = (int)(zt_rng_u64(&rng) % 97);
    /* larger weights than GPT-2 init so that every path carries gradient well above fp32 noise */
    for (size_t i = 0; i < table.total; i++) init[i] *= 2.0f;

    size_t n = table.total;
    float *g_full = malloc(n * 4), *g_ckpt = malloc(n * 4), *g_two = malloc(n * 4), *g_again = malloc(n * 4);
    rig r;
    rig_open(&r, comm, init, 0, 0);
    float l_full = loss_and_grads(&r, in, tg, g_full);
    float l_again = loss_and_grads(&r, in, tg, g_again);
    CHECK(l_full > 0 && memcmp(g_full, g_again, n * 4) == 0 && l_full == l_again, "deterministic_grads", "differ");

    /* finite differences: d loss / d p ~ (L(p+h) - L(p-h)) / 2h, h = 3e-3; the
     * fp32 loss (~4.6, summed in double) carries ~1e-6 absolute rounding, i.e. ~3e-4 of FD noise, and the
     * O(h^2) curvature term is ~1% of large gradients; we
     * require |fd - g| <= 2e-2 |g| + 1e-3 on coordinates from every tensor */
    float *p = (float *)r.e.params;
    int worst_i = -1;
    double worst = 0;
    int bad = 0, checked = 0;
    for (int t = 0; t < table.count; t++) {
        const zt_param_info *pi = &table.params[t];
        for (int k = 0; k < 3; k++) {
            size_t idx = pi->offset + (size_t)(zt_rng_u64(&rng) % pi->numel);
            if (t == 0) idx = pi->offset + (size_t)in[k] * 16 + k; /* a used embedding row */
            float save = p[idx];
            const float h = 3e-3f;
            p[idx] = save + h;
            double lp = loss_and_grads(&r, in, tg, NULL);
            p[idx] = save - h;
            double lm = loss_and_grads(&r, in, tg, NULL);
            p[idx] = save;
            double fd = (lp - lm) / (2.0 * h), g = g_full[idx];
            double err_abs = fabs(fd - g), tol = 2e-2 * fabs(g) + 1e-3;
            checked++;
            if (err_abs > tol) printf("  idx %zu (%s) g %.6g fd %.6g\n", idx, pi->name, g, fd);
            if (err_abs > tol) {
                bad++;
                if (err_abs / tol > worst) worst = err_abs / tol, worst_i = (int)idx;
            }
        }
    }
    CHECK(bad == 0, "whole_model_finite_difference", "%d of %d coordinates off (worst index %d, %.2fx tolerance)",
          bad, checked, worst_i, worst);
    rig_close(&r);

    rig_open(&r, comm, init, 1, 0);
    float l_ckpt = loss_and_grads(&r, in, tg, g_ckpt);
    CHECK(l_ckpt == l_full && memcmp(g_full, g_ckpt, n * 4) == 0, "checkpointing_bit_identical", "loss %.9g vs %.9g",
          l_ckpt, l_full);
    CHECK(r.m.act_bytes < r.m.act_bytes_full && r.m.act_bytes == r.m.act_bytes_ckpt, "checkpointing_saves_memory",
          "%zu vs %zu", r.m.act_bytes, r.m.act_bytes_full);
    rig_close(&r);
    rig_open(&r, comm, init, 1, 2); /* 2 checkpoints for 3 layers: segments of 2 and 1 */
    float l_two = loss_and_grads(&r, in, tg, g_two);
    CHECK(l_two == l_full && memcmp(g_full, g_two, n * 4) == 0 && r.m.segment_layers == 2,
          "number_checkpoints_bit_identical", "loss %.9g vs %.9g", l_two, l_full);
    rig_close(&r);

    float *init2 = malloc(n * 4);
    zt_gpt2_init(&table, &SHAPE, init2, 42);
    zt_gpt2_init(&table, &SHAPE, init, 42);
    CHECK(memcmp(init, init2, n * 4) == 0, "init_seeded", "differs");
    double sd = 0;
    const zt_param_info *w = &table.params[2 + 8]; /* mlp.c_fc.weight */
    for (size_t i = 0; i < w->numel; i++) sd += (double)init[w->offset + i] * init[w->offset + i];
    sd = sqrt(sd / w->numel);
    CHECK(fabs(sd - 0.02) < 0.004, "init_std", "std %.4f", sd);

    check_rng_jump();
    check_init_matches_sequential();
    check_init_ranges_match_whole();

    free(init); free(init2); free(g_full); free(g_ckpt); free(g_two); free(g_again);
    zt_param_table_free(&table);
    comm->destroy(comm);
    MPI_Finalize();
    return zt_check_exit();
}
