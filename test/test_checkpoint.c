/* test_checkpoint.c — sharded HDF5 checkpoints (src/io/checkpoint_*.c): bit-exact save/load round trips
 * across ZeRO stages, `latest` handling, keep_last pruning, leftover temporary directories, and the
 * error messages of damaged checkpoints (checksum, truncation, missing shard, foreign file, other
 * model, other format version).
 *
 * Run alone it is the unit test. Under mpirun it also serves the multi-rank resharding tests:
 *   test_checkpoint --save DIR STAGE STEP   every rank saves a deterministic state
 *   test_checkpoint --load DIR STAGE        every rank loads and checks its ranges bit for bit
 * (values are a hash of (vector, element), so any rank knows what any element must be). */
#define _GNU_SOURCE
#include <hdf5.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "io/checkpoint.h"
#include "engine/engine_internal.h" /* white-box: the engine's own buffers */
#include "model/gpt2.h"

static char root[512];
static zt_comm *comm;

/* the value element i of vector k (0 master, 1 m, 2 v) holds in generation g */
static float value(int k, size_t i, int g) {
    uint64_t z = (uint64_t)i * 0x9E3779B97F4A7C15ull + (uint64_t)k * 0xBF58476D1CE4E5B9ull + (uint64_t)g * 0x94D049BB133111EBull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 40) / 16777216.0 - 0.5) * (k == 2 ? 0.01f : 1.0f) + (k == 2 ? 0.01f : 0.0f);
}

static zt_gpt2_shape tiny_shape(int n_layer, int n_embd) {
    zt_gpt2_shape s = {.n_layer = n_layer, .n_head = 2, .n_embd = n_embd, .vocab_size = 1000, .n_positions = 32, .padded_vocab = 0};
    s.padded_vocab = (s.vocab_size + 127) / 128 * 128;
    return s;
}

typedef struct model { zt_gpt2_shape shape; zt_param_table table; zt_engine e; } model;

static int make_model(model *m, zt_gpt2_shape shape, int stage) {
    zt_err err = {{0}};
    m->shape = shape;
    if (zt_gpt2_param_table(&m->table, &shape, &err)) { printf("%s\n", err.msg); return -1; }
    float *init = calloc(m->table.total, sizeof(float));
    zt_engine_opts o = {stage, 0, 1e6, 0, 0.9f, 0.95f, 1e-8f, 0.1f, 0, 0, 5e7, 0, 0, NULL};
    int rc = zt_engine_create(&m->e, zt_backend_cpu(), comm, &m->table, &o, init, &err);
    free(init);
    if (rc) printf("%s\n", err.msg);
    return rc;
}
static void free_model(model *m) { zt_engine_destroy(&m->e); zt_param_table_free(&m->table); }

/* fills what this rank holds with generation g's values (params = master, as after a step) */
static void fill(model *m, int g) {
    zt_engine *e = &m->e;
    float *p = e->params;
    size_t pa = e->opt.stage == 3 ? e->lay.lo : 0, pb = e->opt.stage == 3 ? e->lay.hi : e->lay.total;
    for (size_t i = pa; i < pb; i++) p[i - pa] = value(0, i, g);
    for (size_t i = e->lay.opt_lo; i < e->lay.opt_hi; i++) {
        e->adam_m[i - e->lay.opt_lo] = value(1, i, g);
        e->adam_v[i - e->lay.opt_lo] = value(2, i, g);
    }
    e->adam_t = 100 + g;
}

/* number of elements this rank holds that differ (bitwise) from generation g */
static size_t mismatches(const model *m, int g) {
    const zt_engine *e = &m->e;
    const float *p = e->params;
    size_t bad = 0, pa = e->opt.stage == 3 ? e->lay.lo : 0, pb = e->opt.stage == 3 ? e->lay.hi : e->lay.total;
    for (size_t i = pa; i < pb; i++) { float x = value(0, i, g); bad += memcmp(&p[i - pa], &x, 4) != 0; }
    for (size_t i = e->lay.opt_lo; i < e->lay.opt_hi; i++) {
        float x = value(0, i, g), y = value(1, i, g), z = value(2, i, g);
        bad += memcmp(&e->master[i - e->lay.opt_lo], &x, 4) != 0;
        bad += memcmp(&e->adam_m[i - e->lay.opt_lo], &y, 4) != 0;
        bad += memcmp(&e->adam_v[i - e->lay.opt_lo], &z, 4) != 0;
    }
    return bad + (e->adam_t != 100 + g);
}

static zt_train_state state_for(long step) {
    zt_train_state st = {step, step * 4096, step * 8, 0x123456789abcdefull + (unsigned long long)step, 65536.0, 3, 2};
    return st;
}

static char *path(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *path(const char *fmt, ...) {
    static char buf[8][1024];
    static int k;
    char *p = buf[k++ % 8], rel[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(rel, sizeof rel, fmt, ap);
    va_end(ap);
    snprintf(p, 1024, "%s/%s", root, rel);
    return p;
}

static int exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static int save(model *m, const char *dir, long step, int g, int keep_last, zt_err *err) {
    fill(m, g);
    zt_train_state st = state_for(step);
    zt_checkpoint_dir d;
    if (zt_checkpoint_dir_open(&d, dir, comm, err)) return -1;
    /* the saves into one directory are one run's (keep_last prunes only a run's own steps); each
     * directory is another run (mixed_runs_refused mixes two) */
    static char run_id[sizeof d.run_id], run_dir[1024];
    if (strcmp(run_dir, dir)) {
        snprintf(run_dir, sizeof run_dir, "%s", dir);
        memcpy(run_id, d.run_id, sizeof run_id);
    }
    memcpy(d.run_id, run_id, sizeof run_id);
    int rc = zt_checkpoint_save(&d, zt_engine_state_view(&m->e), comm, &m->shape, &st, "model:\n  n_layer: 2\n", keep_last, err);
    zt_checkpoint_dir_close(&d);
    return rc;
}

/* load_check loads format-version-1 checkpoints (checkpoint.allow_unverified) while this is set */
static int allow_unverified = 0;

/* loads DIR (resolved) into a fresh engine of this stage and counts mismatches against generation g */
static int load_check(const char *dir, zt_gpt2_shape shape, int stage, int g, long step, zt_err *err, size_t *bad) {
    char sd[1024];
    if (zt_checkpoint_resolve(dir, sd, sizeof sd, err) != 1) return -1;
    model m;
    if (make_model(&m, shape, stage)) return -1;
    zt_train_state st;
    zt_checkpoint_meta meta;
    int rc = zt_checkpoint_load(sd, zt_engine_state_view(&m.e), &shape, comm, &st, &meta, allow_unverified, err);
    if (!rc) {
        zt_train_state want = state_for(step);
        *bad = mismatches(&m, g) + (memcmp(&st, &want, sizeof st) != 0) + (meta.step != step) +
               (strcmp(meta.config_text, "model:\n  n_layer: 2\n") != 0);
        zt_checkpoint_meta_free(&meta);
    }
    free_model(&m);
    return rc;
}

static long h5_data_offset(const char *file, const char *dset) {
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dset, H5P_DEFAULT);
    haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    return (long)off;
}

static void flip_byte(const char *file, long off) {
    FILE *f = fopen(file, "r+b");
    fseek(f, off, SEEK_SET);
    int c = fgetc(f);
    fseek(f, off, SEEK_SET);
    fputc(c ^ 0x10, f);
    fclose(f);
}

static int copy_file(const char *from, const char *to) {
    char cmd[3000];
    snprintf(cmd, sizeof cmd, "cp -r '%s' '%s'", from, to);
    return system(cmd);
}

/* step directory DIR without its manifest: the checks inside the HDF5 files are then the only ones */
static void drop_manifest(const char *dir) {
    char p[1100];
    snprintf(p, sizeof p, "%s/manifest", dir);
    if (unlink(p)) perror(p);
}

/* a load of a damaged copy of step dir SRC must fail with a message containing WANT1 and WANT2 */
static void expect_load_error(const char *name, const char *dir, zt_gpt2_shape shape, const char *want1, const char *want2) {
    zt_err err = {{0}};
    size_t bad = 0;
    int rc = load_check(dir, shape, 1, 1, 20, &err, &bad);
    CHECK(rc != 0 && strstr(err.msg, want1) && (!want2 || strstr(err.msg, want2)), name, "rc %d, message '%s' (want '%s' and '%s')",
          rc, err.msg, want1, want2 ? want2 : "");
}

static void test_roundtrip(void) {
    zt_gpt2_shape shape = tiny_shape(2, 256); /* 1.85M parameters: two 1 Mi-element checksum chunks */
    model m;
    zt_err err = {{0}};
    if (make_model(&m, shape, 1)) return;
    char dir[1024];
    snprintf(dir, sizeof dir, "%s", path("ck"));
    CHECK(zt_checkpoint_resolve(dir, (char[1024]){0}, 1024, &err) == 0, "resolve_missing_dir_is_fresh_start", "%s", err.msg);
    int rc = save(&m, dir, 20, 1, 0, &err);
    CHECK(rc == 0, "save", "%s", err.msg);
    char sd[1024];
    CHECK(zt_checkpoint_resolve(dir, sd, sizeof sd, &err) == 1 && strstr(sd, "step_00000020"), "resolve_latest", "'%s' %s", sd,
          err.msg);
    CHECK(!exists(path("ck/.tmp_step_00000020")) && exists(path("ck/step_00000020/rank_00000.h5")), "tmp_renamed", "layout");
    for (int stage = 0; stage <= 3; stage++) {
        size_t bad = 99;
        char name[64];
        snprintf(name, sizeof name, "load_bit_exact_stage%d", stage);
        rc = load_check(dir, shape, stage, 1, 20, &err, &bad);
        CHECK(rc == 0 && bad == 0, name, "rc %d (%s), %zu mismatches", rc, err.msg, bad);
    }
    /* the reader: arbitrary ranges, crossing chunk (1 Mi) boundaries when the model is big enough */
    zt_checkpoint_reader *r = zt_checkpoint_open(sd, &err);
    CHECK(r != NULL, "reader_open", "%s", err.msg);
    if (r) {
        size_t total = zt_checkpoint_reader_table(r)->total, bad = 0;
        float *buf = malloc(total * sizeof(float));
        size_t ranges[][2] = {{0, total}, {1, 2}, {total - 3, total}, {12345, 54321}, {0, 1}, {1000000, 1100000}, {(size_t)1 << 20, total}};
        for (int k = 0; k < 3; k++)
            for (size_t q = 0; q < sizeof ranges / sizeof ranges[0]; q++) {
                size_t a = ranges[q][0], n = ranges[q][1] - a;
                if (zt_checkpoint_read(r, (zt_ckpt_vector)k, a, n, buf, &err)) { bad++; continue; }
                for (size_t i = 0; i < n; i++) { float x = value(k, a + i, 1); bad += memcmp(&buf[i], &x, 4) != 0; }
            }
        CHECK(bad == 0, "reader_ranges", "%zu mismatches (%s)", bad, err.msg);
        CHECK(zt_checkpoint_verify(r, &err) == 0, "verify_ok", "%s", err.msg);
        zt_train_state st, want = state_for(20);
        zt_checkpoint_reader_state(r, &st);
        CHECK(!memcmp(&st, &want, sizeof st) && zt_checkpoint_reader_meta(r)->adam_t == 101, "reader_state", "state differs");
        free(buf);
        zt_checkpoint_close(r);
    }
    /* index.h5: virtual datasets (h5dump), per-tensor views in HF shapes */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "h5dump -H -p '%s/index.h5' | grep -q VIRTUAL", sd);
    CHECK(system(cmd) == 0, "h5dump_shows_virtual", "%s", cmd);
    {
        hid_t f = H5Fopen(path("ck/step_00000020/index.h5"), H5F_ACC_RDONLY, H5P_DEFAULT);
        hid_t d = H5Dopen2(f, "params/transformer.h.1.attn.c_attn.weight", H5P_DEFAULT);
        hid_t sp = H5Dget_space(d);
        hsize_t dims[2] = {0, 0};
        H5Sget_simple_extent_dims(sp, dims, NULL);
        const zt_param_info *p = NULL;
        for (int i = 0; i < m.table.count; i++)
            if (!strcmp(m.table.params[i].name, "transformer.h.1.attn.c_attn.weight")) p = &m.table.params[i];
        float *t = calloc(p->numel, sizeof(float));
        H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, t);
        size_t bad = 0;
        for (size_t i = 0; i < p->numel; i++) { float x = value(0, p->offset + i, 1); bad += memcmp(&t[i], &x, 4) != 0; }
        CHECK(dims[0] == (hsize_t)p->shape[0] && dims[1] == (hsize_t)p->shape[1] && bad == 0, "tensor_vds_hf_shape",
              "dims %llu x %llu, %zu mismatches", (unsigned long long)dims[0], (unsigned long long)dims[1], bad);
        free(t);
        H5Sclose(sp); H5Dclose(d); H5Fclose(f);
    }
    /* the step directory can move: the virtual datasets name their sources relative to it */
    copy_file(sd, path("moved"));
    {
        size_t bad = 99;
        rc = load_check(path("moved"), shape, 1, 1, 20, &err, &bad);
        CHECK(rc == 0 && bad == 0, "moved_step_dir_loads", "rc %d %s", rc, err.msg);
    }

    /* latest, keep_last, leftovers */
    mkdir(path("ck/.tmp_step_00000100"), 0777);
    FILE *junk = fopen(path("ck/.tmp_step_00000100/index.h5"), "w");
    fputs("junk", junk);
    fclose(junk);
    CHECK(zt_checkpoint_resolve(dir, sd, sizeof sd, &err) == 1 && strstr(sd, "step_00000020"), "leftover_tmp_ignored", "%s", sd);
    for (long s = 40; s <= 80; s += 20) rc |= save(&m, dir, s, (int)(s / 20), 2, &err);
    CHECK(rc == 0, "save_more", "%s", err.msg);
    CHECK(!exists(path("ck/step_00000020")) && !exists(path("ck/step_00000040")) && exists(path("ck/step_00000060")) &&
              exists(path("ck/step_00000080")),
          "keep_last_prunes_oldest", "wrong step directories left");
    CHECK(!exists(path("ck/.tmp_step_00000100")), "leftover_tmp_removed_by_save", "still there");
    CHECK(zt_checkpoint_resolve(dir, sd, sizeof sd, &err) == 1 && strstr(sd, "step_00000080"), "latest_updated", "%s", sd);
    {
        size_t bad = 99;
        rc = load_check(dir, shape, 2, 4, 80, &err, &bad);
        CHECK(rc == 0 && bad == 0, "load_latest_generation", "rc %d %s bad %zu", rc, err.msg, bad);
    }
    /* saving the same step again replaces it */
    rc = save(&m, dir, 80, 5, 2, &err);
    {
        size_t bad = 99;
        int rc2 = load_check(dir, shape, 1, 5, 80, &err, &bad);
        CHECK(rc == 0 && rc2 == 0 && bad == 0, "resave_same_step", "rc %d %d %s bad %zu", rc, rc2, err.msg, bad);
    }
    /* latest pointing at a missing directory; a directory without latest uses its newest step */
    FILE *lf = fopen(path("ck/latest"), "w");
    fputs("step_00000999\n", lf);
    fclose(lf);
    CHECK(zt_checkpoint_resolve(dir, sd, sizeof sd, &err) == -1 && strstr(err.msg, "step_00000999"), "latest_missing_target",
          "%s", err.msg);
    unlink(path("ck/latest"));
    CHECK(zt_checkpoint_resolve(dir, sd, sizeof sd, &err) == 1 && strstr(sd, "step_00000080"), "no_latest_uses_newest", "%s", sd);
    mkdir(path("empty"), 0777);
    CHECK(zt_checkpoint_resolve(path("empty"), sd, sizeof sd, &err) == 0, "empty_dir_is_fresh_start", "%s", err.msg);
    free_model(&m);
}

/* sets integer attribute NAME of group GROUP (NULL: the root) of an HDF5 file, as h5py would */
static void set_i64_attr(const char *file, const char *group, const char *name, long long v) {
    hid_t f = H5Fopen(file, H5F_ACC_RDWR, H5P_DEFAULT);
    hid_t g = group ? H5Gopen2(f, group, H5P_DEFAULT) : f;
    hid_t a = H5Aopen(g, name, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_LLONG, &v);
    H5Aclose(a);
    if (group) H5Gclose(g);
    H5Fclose(f);
}

/* a save records its run id then the lineage it descends from, at most ZT_CKPT_LINEAGE_MAX ids:
 * a chain longer than that drops its oldest runs, and the reader reads back what was saved */
static void test_lineage_bounded(void) {
    model m;
    zt_err err = {{0}};
    if (make_model(&m, tiny_shape(2, 64), 1)) return;
    zt_checkpoint_dir d;
    int rc = zt_checkpoint_dir_open(&d, path("lineage"), comm, &err);
    for (int i = 0; !rc && i < ZT_CKPT_LINEAGE_MAX; i++) snprintf(d.lineage[i], sizeof d.lineage[i], "%016x", i + 1);
    d.n_lineage = ZT_CKPT_LINEAGE_MAX;
    zt_train_state st = state_for(5);
    fill(&m, 1);
    if (!rc) rc = zt_checkpoint_save(&d, zt_engine_state_view(&m.e), comm, &m.shape, &st, "", 0, &err);
    zt_checkpoint_reader *r = rc ? NULL : zt_checkpoint_open(path("lineage/step_00000005"), &err);
    const zt_checkpoint_meta *meta = r ? zt_checkpoint_reader_meta(r) : NULL;
    CHECK(meta && meta->n_lineage == ZT_CKPT_LINEAGE_MAX && !strcmp(meta->lineage[0], d.run_id) &&
              !strcmp(meta->lineage[1], "0000000000000001") && !strcmp(meta->lineage[ZT_CKPT_LINEAGE_MAX - 1], "000000000000003f"),
          "lineage_saved_bounded", "rc %d %s, %d ids", rc, err.msg, meta ? meta->n_lineage : -1);
    zt_checkpoint_close(r);
    zt_checkpoint_dir_close(&d);
    free_model(&m);
}

static void test_damage(void) {
    zt_gpt2_shape shape = tiny_shape(2, 64);
    model m;
    zt_err err = {{0}};
    if (make_model(&m, shape, 1)) return;
    CHECK(save(&m, path("good"), 20, 1, 0, &err) == 0, "save_small", "%s", err.msg);
    free_model(&m);
    char good[1024];
    snprintf(good, sizeof good, "%s", path("good/step_00000020"));

    copy_file(good, path("corrupt"));
    flip_byte(path("corrupt/rank_00000.h5"), h5_data_offset(path("corrupt/rank_00000.h5"), "master") + 4 * 1000 + 1);
    expect_load_error("corrupt_byte_checksum", path("corrupt"), shape, "corrupt/rank_00000.h5: checksum mismatch in dataset master", NULL);
    {
        zt_checkpoint_reader *r = zt_checkpoint_open(path("corrupt"), &err);
        CHECK(r && zt_checkpoint_verify(r, &err) != 0 && strstr(err.msg, "checksum mismatch"), "verify_detects_corruption", "%s",
              err.msg);
        zt_checkpoint_close(r);
    }
    copy_file(good, path("corrupt_v"));
    flip_byte(path("corrupt_v/rank_00000.h5"), h5_data_offset(path("corrupt_v/rank_00000.h5"), "adam_v") + 7);
    expect_load_error("corrupt_adam_v_checksum", path("corrupt_v"), shape, "rank_00000.h5: checksum mismatch in dataset adam_v", NULL);

    copy_file(good, path("trunc"));
    struct stat st;
    stat(path("trunc/rank_00000.h5"), &st);
    if (truncate(path("trunc/rank_00000.h5"), st.st_size / 2)) perror("truncate");
    expect_load_error("truncated_shard", path("trunc"), shape, "trunc/rank_00000.h5: ", "truncated");

    copy_file(good, path("missing"));
    unlink(path("missing/rank_00000.h5"));
    expect_load_error("missing_shard", path("missing"), shape, "missing shard ", "missing/rank_00000.h5");

    /* a foreign HDF5 file as index.h5 */
    mkdir(path("foreign"), 0777);
    {
        hid_t f = H5Fcreate(path("foreign/index.h5"), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
        hsize_t n = 16;
        hid_t sp = H5Screate_simple(1, &n, NULL);
        hid_t d = H5Dcreate2(f, "random", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        float x[16];
        for (int i = 0; i < 16; i++) x[i] = value(0, (size_t)i, 9);
        H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
        H5Dclose(d); H5Sclose(sp); H5Fclose(f);
    }
    expect_load_error("foreign_hdf5_index", path("foreign"), shape, "foreign/index.h5: not a zerotrain checkpoint", NULL);
    mkdir(path("text"), 0777);
    FILE *tf = fopen(path("text/index.h5"), "w");
    fputs("hello\n", tf);
    fclose(tf);
    expect_load_error("text_file_index", path("text"), shape, "text/index.h5: not a readable HDF5 file", NULL);

    /* a different model */
    expect_load_error("different_model_shape", good, tiny_shape(2, 32), "checkpoint is for a different model: tensor transformer.wte.weight has shape [1000, 64], the config needs [1000, 32]", NULL);
    expect_load_error("different_model_layers", good, tiny_shape(3, 64), "checkpoint is for a different model: it has 28 tensors (n_layer 2), the config needs 40", NULL);

    /* another format version; version 1 (no run id, digests or metadata checksum) loads only when
     * allowed (checkpoint.allow_unverified). These edits are made as by hand, the step's manifest
     * removed too (with it, it refuses any edit first: t_checkpoint_fuzz.py), so that the checks
     * inside the index still have to catch them. */
    copy_file(good, path("v9"));
    drop_manifest(path("v9"));
    set_i64_attr(path("v9/index.h5"), NULL, "format_version", 9);
    expect_load_error("other_format_version", path("v9"), shape, "v9/index.h5: checkpoint format version 9 is not supported", NULL);
    copy_file(good, path("v1"));
    drop_manifest(path("v1"));
    set_i64_attr(path("v1/index.h5"), NULL, "format_version", 1);
    expect_load_error("format_version_1_refused", path("v1"), shape,
                      "v1/index.h5: checkpoint format version 1: its trainer state", "checkpoint.allow_unverified=true");
    {
        size_t bad = 99;
        allow_unverified = 1;
        int rc = load_check(path("v1"), shape, 1, 1, 20, &err, &bad);
        allow_unverified = 0;
        CHECK(rc == 0 && bad == 0, "format_version_1_loads_when_allowed", "rc %d %s bad %zu", rc, err.msg, bad);
    }

    /* the trainer state is covered by the metadata checksum */
    copy_file(good, path("state_edit"));
    drop_manifest(path("state_edit"));
    set_i64_attr(path("state_edit/index.h5"), "state", "data_samples", 12345);
    expect_load_error("edited_state_refused", path("state_edit"), shape, "state_edit/index.h5: metadata checksum mismatch", NULL);
    copy_file(good, path("step_edit"));
    drop_manifest(path("step_edit"));
    set_i64_attr(path("step_edit/index.h5"), NULL, "adam_t", 7);
    expect_load_error("edited_adam_t_refused", path("step_edit"), shape, "step_edit/index.h5: metadata checksum mismatch", NULL);

    /* a rank file of another save of the same step (another run) is refused */
    if (make_model(&m, shape, 1)) return;
    CHECK(save(&m, path("other"), 20, 2, 0, &err) == 0, "save_other_run", "%s", err.msg);
    free_model(&m);
    copy_file(good, path("mixed"));
    copy_file(path("other/step_00000020/rank_00000.h5"), path("mixed/rank_00000.h5"));
    expect_load_error("mixed_runs_refused_by_manifest", path("mixed"), shape, "mixed/rank_00000.h5: damaged: checksum mismatch",
                      "not the file this step saved");
    drop_manifest(path("mixed"));
    expect_load_error("mixed_runs_refused", path("mixed"), shape, "mixed/rank_00000.h5: belongs to another save", NULL);
    {
        zt_checkpoint_reader *r = zt_checkpoint_open(path("mixed"), &err);
        CHECK(r && zt_checkpoint_verify(r, &err) != 0 && strstr(err.msg, "belongs to another save"), "verify_detects_mixed_runs",
              "%s", err.msg);
        zt_checkpoint_close(r);
    }
}

/* zt_escape (util.c): what the checkpoint's messages use for file contents */
static void test_escape(void) {
    char buf[64];
    CHECK(!strcmp(zt_escape_str("step_1\nx\ty\r", buf, sizeof buf), "step_1\\nx\\ty\\r"), "escape_control", "'%s'", buf);
    CHECK(!strcmp(zt_escape("a\0\x7f\xff", 4, buf, sizeof buf), "a\\x00\\x7F\\xFF"), "escape_nul_del_invalid_utf8", "'%s'", buf);
    CHECK(!strcmp(zt_escape_str("caf\xc3\xa9 \xe2\x82\xac", buf, sizeof buf), "caf\xc3\xa9 \xe2\x82\xac"), "escape_keeps_utf8", "'%s'", buf);
    char twice[64];
    zt_escape_str("a\nb\\n", buf, sizeof buf);
    CHECK(!strcmp(zt_escape_str(buf, twice, sizeof twice), buf), "escape_idempotent", "'%s' -> '%s'", buf, twice);
    CHECK(!strcmp(zt_escape_str("abcdefghij", buf, 8), "abcd...") && strlen(buf) == 7, "escape_cut_short", "'%s'", buf);
}

static void test_crc(void) {
    CHECK(zt_crc32c(0, "123456789", 9) == 0xE3069283u, "crc32c_check_value", "got %08x", zt_crc32c(0, "123456789", 9));
    CHECK(zt_crc32c(zt_crc32c(0, "1234", 4), "56789", 5) == 0xE3069283u, "crc32c_continues", "differs");
}

/* ---------------------------------------------------------------- mpirun modes */

static int mpi_save(const char *dir, int stage, long step) {
    model m;
    zt_err err = {{0}};
    if (make_model(&m, tiny_shape(2, 128), stage)) return 1;
    int rc = save(&m, dir, step, 3, 0, &err);
    if (rc && comm->rank == 0) printf("%s\n", err.msg);
    CHECK(rc == 0, "mpi_save", "%s", err.msg);
    free_model(&m);
    return zt_check_exit();
}

static int mpi_load(const char *dir, int stage, long step) {
    size_t bad = 0;
    zt_err err = {{0}};
    int rc = load_check(dir, tiny_shape(2, 128), stage, 3, step, &err, &bad);
    double b = (double)bad;
    comm->allreduce_host_double(comm, &b, 1);
    char name[64];
    snprintf(name, sizeof name, "mpi_load_rank%d", comm->rank);
    CHECK(rc == 0 && bad == 0, name, "rc %d (%s), %zu mismatches here, %.0f in all", rc, err.msg, bad, b);
    if (comm->rank == 0) {
        /* per-tensor virtual datasets over several shards (tensors split mid-row) */
        char sd[1024];
        zt_checkpoint_resolve(dir, sd, sizeof sd, &err);
        model m;
        make_model(&m, tiny_shape(2, 128), 0);
        const zt_param_table *t = &m.table;
        char idx[1100];
        snprintf(idx, sizeof idx, "%s/index.h5", sd);
        hid_t f = H5Fopen(idx, H5F_ACC_RDONLY, H5P_DEFAULT);
        size_t vbad = 0;
        for (int i = 0; i < t->count; i++) {
            const zt_param_info *p = &t->params[i];
            char nm[128];
            snprintf(nm, sizeof nm, "params/%s", p->name);
            hid_t d = H5Dopen2(f, nm, H5P_DEFAULT);
            float *x = calloc(p->numel, sizeof(float));
            H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
            for (size_t k = 0; k < p->numel; k++) { float y = value(0, p->offset + k, 3); vbad += memcmp(&x[k], &y, 4) != 0; }
            free(x);
            H5Dclose(d);
        }
        H5Fclose(f);
        free_model(&m);
        CHECK(vbad == 0, "mpi_tensor_vds", "%zu mismatches", vbad);
        zt_checkpoint_reader *r = zt_checkpoint_open(sd, &err);
        CHECK(r && zt_checkpoint_verify(r, &err) == 0, "mpi_verify", "%s", err.msg);
        zt_checkpoint_close(r);
    }
    return zt_check_exit();
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    zt_err err = {{0}};
    comm = zt_comm_mpi(NULL, &err);
    zt_log_set_rank(comm->rank);
    int rc;
    if (argc >= 5 && !strcmp(argv[1], "--save")) {
        rc = mpi_save(argv[2], atoi(argv[3]), atol(argv[4]));
    } else if (argc >= 5 && !strcmp(argv[1], "--load")) {
        rc = mpi_load(argv[2], atoi(argv[3]), atol(argv[4]));
    } else {
        snprintf(root, sizeof root, "%s/zt_test_checkpoint_XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
        if (!mkdtemp(root)) { perror("mkdtemp"); return 2; }
        test_crc();
        test_escape();
        test_roundtrip();
        test_damage();
        test_lineage_bounded();
        char cmd[600];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
        if (zt_checks_failed == 0 && system(cmd)) printf("cannot remove %s\n", root);
        rc = zt_check_exit();
    }
    comm->destroy(comm);
    MPI_Finalize();
    return rc;
}
