/* export.c — `zerotrain export` (a checkpoint's master weights as a Hugging Face directory
 * or one HDF5 file of named tensors) and `zerotrain info` (what a checkpoint holds, and whether
 * every checksum still matches). Both read one tensor / one chunk at a time through
 * zt_checkpoint_reader, so memory stays bounded by the largest tensor whatever the model size. */
#define _GNU_SOURCE
#include <hdf5.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/checkpoint.h"
#include "cmd/commands.h"
#include "cmd/help.h"
#include "io/hf.h"
#include "cmd/sample.h"
#include "util/test_hooks.h"

static zt_checkpoint_reader *open_checkpoint(const char *path, zt_err *err) {
    char sd[4096];
    int found = zt_checkpoint_resolve(path, sd, sizeof sd, err);
    if (found == 0) zt_fail(err, "%s: no checkpoint found (neither a step directory nor a checkpoint directory with one)", path);
    return found == 1 ? zt_checkpoint_open(sd, err) : NULL;
}

/* ---------------------------------------------------------------- export */

/* OUT/model.h5: one dataset per tensor (Hugging Face name and shape), attributes with the model shape */
static int export_hdf5(zt_checkpoint_reader *r, const char *out, int f16, zt_err *err) {
    const zt_param_table *t = zt_checkpoint_reader_table(r);
    const zt_checkpoint_meta *m = zt_checkpoint_reader_meta(r);
    char final[4200], tmp[4220];
    snprintf(final, sizeof final, "%s/model.h5", out);
    snprintf(tmp, sizeof tmp, "%s/.model.h5.tmp", out);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    hid_t f = H5Fcreate(tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (f < 0) return zt_fail(err, "%s: cannot create", tmp);
    /* IEEE binary16 as an HDF5 float type (h5py reads it as numpy float16) */
    hid_t half = H5Tcopy(H5T_IEEE_F32LE);
    H5Tset_fields(half, 15, 10, 5, 0, 10);
    H5Tset_size(half, 2);
    H5Tset_ebias(half, 15);
    hid_t ftype = f16 ? half : H5T_IEEE_F32LE;
    const char *keys[5] = {"n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    long long vals[5] = {m->shape.n_layer, m->shape.n_head, m->shape.n_embd, m->shape.vocab_size, m->shape.n_positions};
    int rc = 0;
    for (int i = 0; i < 5 && !rc; i++) {
        hid_t sp = H5Screate(H5S_SCALAR);
        hid_t a = H5Acreate2(f, keys[i], H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
        rc = a < 0 || H5Awrite(a, H5T_NATIVE_LLONG, &vals[i]) < 0;
        if (a >= 0) H5Aclose(a);
        H5Sclose(sp);
    }
    size_t biggest = 0;
    for (int i = 0; i < t->count; i++) biggest = t->params[i].numel > biggest ? t->params[i].numel : biggest;
    float *buf = zt_xmalloc(biggest * sizeof(float));
    uint16_t *h = f16 ? zt_xmalloc(biggest * sizeof(uint16_t)) : NULL;
    for (int i = 0; i < t->count && !rc; i++) {
        const zt_param_info *p = &t->params[i];
        if (zt_checkpoint_read(r, ZT_CKPT_MASTER, p->offset, p->numel, buf, err)) { rc = -1; break; }
        hsize_t dims[2] = {(hsize_t)p->shape[0], p->ndim == 2 ? (hsize_t)p->shape[1] : 1};
        hid_t sp = H5Screate_simple(p->ndim, dims, NULL);
        hid_t d = H5Dcreate2(f, p->name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (f16)
            for (size_t k = 0; k < p->numel; k++) h[k] = zt_f32_to_f16_bits(buf[k]);
        if (d < 0 || H5Dwrite(d, f16 ? half : H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, f16 ? (void *)h : (void *)buf) < 0)
            rc = zt_fail(err, "%s: cannot write dataset %s", tmp, p->name);
        if (d >= 0) H5Dclose(d);
        H5Sclose(sp);
    }
    free(buf);
    free(h);
    H5Tclose(half);
    if (H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close", tmp);
    if (!rc && rename(tmp, final)) rc = zt_fail(err, "%s: cannot rename to %s", tmp, final);
    if (rc) unlink(tmp);
    return rc;
}

int zt_cmd_export(int argc, char **argv) {
    const char *ckpt = NULL, *out = NULL, *format = "safetensors", *dtype = "fp32", *vocab = NULL;
    zt_err err = {{0}};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if ((!strcmp(a, "-o") || !strcmp(a, "--output")) && i + 1 < argc) out = argv[++i];
        else if (!strcmp(a, "--format") && i + 1 < argc) format = argv[++i];
        else if (!strcmp(a, "--dtype") && i + 1 < argc) dtype = argv[++i];
        else if (!strcmp(a, "--vocab") && i + 1 < argc) vocab = argv[++i];
        else if (a[0] != '-' && !ckpt) ckpt = a;
        else return zt_help_bad_argument("export", a, i + 1 < argc ? argv[i + 1] : NULL);
    }
    if (!ckpt || !out) return zt_help_missing("export", !ckpt ? "CHECKPOINT" : "-o DIR");
    const char *st_dtype = !strcmp(dtype, "fp32") ? "F32" : !strcmp(dtype, "bf16") ? "BF16" : !strcmp(dtype, "fp16") ? "F16" : NULL;
    int hdf5 = !strcmp(format, "hdf5");
    if (!st_dtype) zt_fail(&err, "export: --dtype must be fp32, bf16 or fp16, got '%s'", dtype);
    else if (!hdf5 && strcmp(format, "safetensors")) zt_fail(&err, "export: --format must be safetensors or hdf5, got '%s'", format);
    else if (hdf5 && !strcmp(dtype, "bf16"))
        zt_fail(&err, "export: --format hdf5 takes --dtype fp32 or fp16 (HDF5/numpy have no bfloat16; use safetensors for bf16)");
    if (err.msg[0]) { zt_print_error(&err); return 2; }
    zt_checkpoint_reader *r = open_checkpoint(ckpt, &err);
    if (!r) { zt_print_error(&err); return 1; }
    const zt_checkpoint_meta *m = zt_checkpoint_reader_meta(r);
    double t0 = zt_now();
    struct stat out_st;
    int out_existed = stat(out, &out_st) == 0; /* a failed export removes only a directory it made */
    int rc;
    if (hdf5) {
        rc = mkdir(out, 0777) && !(access(out, W_OK) == 0) ? zt_fail(&err, "%s: cannot create directory", out) : 0;
        if (!rc) rc = export_hdf5(r, out, !strcmp(dtype, "fp16"), &err);
    } else {
        zt_err why_not = {{0}};
        rc = zt_checkpoint_export_hf(r, out, st_dtype, vocab ? vocab : zt_default_vocab_dir(), &why_not, &err);
        if (!rc && why_not.msg[0])
            zt_warn("%s: tokenizer not written (the weights are): %s", out, why_not.msg);
    }
    if (rc) {
        /* what the writers made is gone already (they work in temporary files); the directory goes too
         * when this export created it and it is still empty (rmdir refuses anything else) */
        if (!out_existed) rmdir(out);
        zt_print_error(&err);
    } else
        printf("exported step %ld (%zu parameters, %s %s) to %s in %.1f s\n", m->step, m->total, format, dtype, out,
               zt_now() - t0);
    zt_checkpoint_close(r);
    return rc ? 1 : 0;
}

/* ---------------------------------------------------------------- info */

int zt_cmd_info(int argc, char **argv) {
    zt_err err = {{0}};
    if (argc < 2) return zt_help_missing("info", "CHECKPOINT");
    if (argc > 2 || argv[1][0] == '-') return zt_help_bad_argument("info", argv[argc > 2 && argv[1][0] != '-' ? 2 : 1], NULL);
    while (zt_test_hook_load_stall(0)) pause(); /* a read stuck on its file system (run --restarts' health check) */
    zt_checkpoint_reader *r = open_checkpoint(argv[1], &err);
    if (!r) { zt_print_error(&err); return 1; }
    const zt_checkpoint_meta *m = zt_checkpoint_reader_meta(r);
    zt_train_state st;
    zt_checkpoint_reader_state(r, &st);
    const zt_gpt2_shape *s = &m->shape;
    size_t bytes = 0;
    for (int k = 0; k < m->world_size; k++) bytes += zt_checkpoint_file_bytes(r, k);
    printf("checkpoint: %s\n", argv[1]);
    printf("  format: %s version %d%s%s\n", ZT_CKPT_FORMAT, m->format_version, m->run_id[0] ? ", run id " : "", m->run_id);
    if (m->n_lineage > 1) /* what keep_last counts (checkpoint.h): the runs this checkpoint descends from */
        printf("  lineage: %d runs (resumed from a checkpoint of run %s)\n", m->n_lineage, m->lineage[1]);
    else if (m->run_id[0])
        printf("  lineage: this run alone (a fresh start, or saved before lineages were recorded)\n");
    printf("  step %ld, tokens seen %ld, optimizer steps %ld, data samples %ld\n", m->step, m->tokens_seen, m->adam_t,
           st.data_samples);
    printf("  saved by %d rank%s at ZeRO stage %d (shard %zu elements)\n", m->world_size, m->world_size > 1 ? "s" : "",
           m->zero_stage, m->shard);
    if (m->tensor_parallel > 1)
        printf("  tensor parallel: %d ranks a group x %d data-parallel rank%s; rank_W.h5 holds tensor-parallel rank W %% %d's "
               "part (the index presents whole tensors)\n", m->tensor_parallel, m->world_size / m->tensor_parallel,
               m->world_size / m->tensor_parallel > 1 ? "s" : "", m->tensor_parallel);
    printf("  model: GPT-2 n_layer %d, n_head %d, n_embd %d, vocab_size %d, n_positions %d: %zu parameters (%.2fM)\n",
           s->n_layer, s->n_head, s->n_embd, s->vocab_size, s->n_positions, m->total, m->total / 1e6);
    printf("  data: fp32 master weights + Adam m, v = %.1f MB in %d shard file%s (%.1f MB on disk)\n",
           12.0 * (double)m->total / 1e6, m->world_size, m->world_size > 1 ? "s" : "", (double)bytes / 1e6);
    for (int k = 0; k < m->world_size; k++) {
        if (k == 4 && m->world_size > 6) { printf("    ... %d more\n", m->world_size - 5); k = m->world_size - 1; }
        printf("    rank_%05d.h5  %.1f MB\n", k, (double)zt_checkpoint_file_bytes(r, k) / 1e6);
    }
    printf("  trainer state: rng_state %llu, loss scale %g (good steps %d, hysteresis left %d)\n", st.rng_state, st.loss_scale,
           st.loss_scale_good_steps, st.hysteresis_left);
    printf("  config:\n");
    for (const char *p = m->config_text; *p;) {
        size_t n = strcspn(p, "\n");
        printf("    %.*s\n", (int)n, p);
        p += n + (p[n] == '\n');
    }
    fflush(stdout);
    double t0 = zt_now();
    int rc = zt_checkpoint_verify(r, &err);
    if (rc) {
        printf("  integrity: CORRUPT\n");
        zt_print_error(&err);
    } else {
        printf("  integrity: OK (CRC32C of every chunk of %d shard file%s verified, %.1f s)\n", m->world_size,
               m->world_size > 1 ? "s" : "", zt_now() - t0);
    }
    zt_checkpoint_close(r);
    return rc ? 1 : 0;
}
