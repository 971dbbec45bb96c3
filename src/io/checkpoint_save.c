/* checkpoint_save.c — writing a checkpoint (layout in checkpoint.h): every rank's file, rank 0's
 * index, the atomic rename into place, `latest`, pruning.
 *
 * One path for every engine: each rank reads its partition of master/m/v through
 * zt_engine_state_read (which knows whether a piece lives in device or, with Twin-Flow offload,
 * host memory) into a host staging buffer of at most CK_STAGE_ELEMS elements, checksums it and
 * hands it to HDF5 in large contiguous writes with no fill values and no filters.
 * Errors carry the operating system's reason where HDF5 has one ("No space left on device"). */
#define _GNU_SOURCE
#include "io/checkpoint_common.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "comm/fail_together.h"

/* ================================================================ rank files */

static int write_slab(hid_t d, size_t off, size_t n, const float *buf) {
    hsize_t start = off, count = n;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    herr_t rc = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

/* The first non-finite element of x[0, n), or n. A checkpoint holds finite state only: a NaN or inf
 * reaching a save (a diverged run with the guard off, corrupted swap contents) fails the save, so
 * `latest` stays on the last good checkpoint. */
static size_t first_nonfinite(const float *x, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return n;
}

/* "VECTOR of TENSOR (element I)": where flat element `flat` of a saved vector belongs */
static void name_element(const zt_engine *e, int which, size_t flat, char *buf, size_t cap) {
    const zt_param_table *t = zt_engine_table(e);
    for (int i = 0; i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        if (flat >= p->offset && flat < p->offset + p->numel) {
            snprintf(buf, cap, "%s of %s (element %zu)", ck_vec_names[which], p->name, flat - p->offset);
            return;
        }
    }
    snprintf(buf, cap, "%s element %zu", ck_vec_names[which], flat);
}

/* Writes dataset NAME: this rank's partition of optimizer vector `which` with its per-chunk CRC32C
 * attributes. Fills crc (ck_max(nch, 1) values) and *chunk. */
static int write_vector(hid_t f, const char *path, int which, zt_engine *e, float *stage, uint32_t *crc, size_t *chunk,
                        zt_err *err) {
    const char *name = ck_vec_names[which];
    size_t n = zt_engine_layout_of(e)->hi - zt_engine_layout_of(e)->lo, C = ck_chunk_elems(n), nch = (n + C - 1) / C;
    *chunk = C;
    hsize_t dim = n;
    hid_t sp = H5Screate_simple(1, &dim, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER); /* every element is written: no fill pass */
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    size_t group = ck_max(1, CK_STAGE_ELEMS / C) * C; /* whole chunks per staged write */
    int nonfinite = 0;
    for (size_t x = 0; !rc && x < n; x += group) {
        size_t k = ck_min(group, n - x);
        zt_engine_state_read(e, which, zt_engine_layout_of(e)->lo - zt_engine_layout_of(e)->opt_lo + x, k, stage);
        size_t bad = first_nonfinite(stage, k);
        if (bad < k) {
            char where[160];
            name_element(e, which, zt_engine_layout_of(e)->lo + x + bad, where, sizeof where);
            rc = nonfinite = zt_fail(err, "%s: not saved: %s is %g, and a checkpoint holds finite state only "
                                          "(latest stays on the last good checkpoint)", path, where, stage[bad]);
            break;
        }
        ck_crc_chunks(stage, k, C, crc + x / C);
        rc = write_slab(d, x, k, stage);
    }
    if (!rc && ck_put_u32s(d, "crc32c", crc, nch)) rc = -1;
    if (!rc && ck_put_u64(d, "checksum_chunk", C)) rc = -1;
    if (!rc && ck_put_str(d, "checksum", "crc32c of each checksum_chunk elements (little-endian bytes)")) rc = -1;
    char why[CK_WHYCAP];
    if (rc && !nonfinite) zt_fail(err, "%s: cannot write dataset %s (%zu elements): %s", path, name, n, ck_h5_why(why));
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return rc;
}

/* Writes TMPDIR/rank_NNNNN.h5 and fsyncs it; *digest gets its shard digest. */
static int write_rank_file(const char *tmpdir, zt_engine *e, long step, const char *run_id, uint32_t *digest,
                           zt_err *err) {
    char name[32], path[CK_PATHCAP], why[CK_WHYCAP];
    ck_rank_file_name(name, sizeof name, zt_engine_layout_of(e)->rank);
    if (ck_path_join(path, sizeof path, tmpdir, name, err)) return -1;
    size_t n = zt_engine_layout_of(e)->hi - zt_engine_layout_of(e)->lo, C = ck_chunk_elems(n), nch = ck_max((n + C - 1) / C, 1);
    float *stage = zt_engine_backend(e)->host_alloc(ck_max(ck_min(n, ck_max(CK_STAGE_ELEMS / C, 1) * C), 1) * sizeof(float));
    if (!stage) return zt_fail(err, "%s: out of host memory for the staging buffer", path);
    hid_t fapl = ck_file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int rc = 0;
    if (f < 0) rc = zt_fail(err, "%s: cannot create: %s", path, ck_h5_why(why));
    if (!rc && (ck_put_u64(f, "lo", zt_engine_layout_of(e)->lo) || ck_put_u64(f, "hi", zt_engine_layout_of(e)->hi) || ck_put_i64(f, "rank", zt_engine_layout_of(e)->rank) ||
                ck_put_i64(f, "world_size", zt_engine_layout_of(e)->world) || ck_put_i64(f, "step", step) ||
                ck_put_str(f, "format", ZT_CKPT_FORMAT) || ck_put_str(f, "run_id", run_id)))
        rc = zt_fail(err, "%s: cannot write attributes: %s", path, ck_h5_why(why));
    uint32_t *crc[3];
    size_t chunk[3], nchs[3];
    for (int v = 0; v < 3; v++) {
        crc[v] = zt_xcalloc(nch, sizeof(uint32_t));
        nchs[v] = n ? (n + C - 1) / C : 0;
    }
    for (int v = 0; v < 3 && !rc; v++) rc = write_vector(f, path, v, e, stage, crc[v], &chunk[v], err);
    if (!rc) *digest = ck_shard_digest(zt_engine_layout_of(e)->lo, zt_engine_layout_of(e)->hi, step, run_id, chunk, crc, nchs);
    for (int v = 0; v < 3; v++) free(crc[v]);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, ck_h5_why(why));
    zt_engine_backend(e)->host_free(stage);
    if (!rc) rc = ck_fsync_path(path, err);
    return rc;
}

/* ================================================================ index */

/* maps virtual elements vstart/vcount to elements [src_off, src_off + n) of rank file r's dataset
 * `dset` (which has src_len elements) */
static void add_mapping(hid_t dcpl, hid_t vspace, const hsize_t *vstart, const hsize_t *vcount, int r,
                        const char *dset, size_t src_len, size_t src_off, size_t n) {
    char file[32];
    ck_rank_file_name(file, sizeof file, r);
    H5Sselect_hyperslab(vspace, H5S_SELECT_SET, vstart, NULL, vcount, NULL);
    hsize_t len = src_len, start = src_off, count = n;
    hid_t ss = H5Screate_simple(1, &len, NULL);
    H5Sselect_hyperslab(ss, H5S_SELECT_SET, &start, NULL, &count, NULL);
    H5Pset_virtual(dcpl, vspace, file, dset, ss);
    H5Sclose(ss);
}

static void vds_layout(int rank, const hsize_t *dims, hid_t *dcpl_out, hid_t *space_out) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    float nan = NAN; /* elements whose shard cannot be read show as NaN, not as plausible zeros */
    H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &nan);
    *dcpl_out = dcpl;
    *space_out = H5Screate_simple(rank, dims, NULL);
}

/* flat virtual dataset NAME[total] = concatenation of every rank file's NAME */
static int write_flat_vds(hid_t f, const char *name, const zt_engine *e) {
    hsize_t dim = zt_engine_layout_of(e)->total;
    hid_t dcpl, vs;
    vds_layout(1, &dim, &dcpl, &vs);
    for (int r = 0; r < zt_engine_layout_of(e)->world; r++) {
        size_t lo, hi;
        ck_rank_range(zt_engine_layout_of(e)->total, zt_engine_layout_of(e)->shard, r, &lo, &hi);
        if (hi <= lo) continue;
        hsize_t st = lo, cnt = hi - lo;
        add_mapping(dcpl, vs, &st, &cnt, r, name, hi - lo, 0, hi - lo);
    }
    H5Sselect_all(vs);
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(vs);
    H5Pclose(dcpl);
    return rc;
}

/* params/NAME: one tensor of the master weights in its Hugging Face shape. A tensor that spans
 * shards (or starts mid-row in one) maps as up to three hyperslabs per shard: a partial first row,
 * whole rows, a partial last row. */
static int write_tensor_vds(hid_t g, const zt_param_info *p, const zt_engine *e) {
    hsize_t dims[2] = {(hsize_t)p->shape[0], p->ndim == 2 ? (hsize_t)p->shape[1] : 1};
    size_t row = p->ndim == 2 ? (size_t)p->shape[1] : p->numel;
    hid_t dcpl, vs;
    vds_layout(p->ndim, dims, &dcpl, &vs);
    for (int r = 0; r < zt_engine_layout_of(e)->world; r++) {
        size_t lo, hi;
        ck_rank_range(zt_engine_layout_of(e)->total, zt_engine_layout_of(e)->shard, r, &lo, &hi);
        size_t x = ck_max(lo, p->offset), y = ck_min(hi, p->offset + p->numel);
        for (size_t u = x - p->offset, w = y - p->offset; x < y && u < w;) {
            size_t r0 = u / row, c0 = u % row, k;
            hsize_t st[2], cnt[2];
            if (c0 || w - u < row) {
                k = ck_min(row - c0, w - u);
                st[0] = r0; st[1] = c0; cnt[0] = 1; cnt[1] = k;
            } else {
                size_t rows = (w - u) / row;
                k = rows * row;
                st[0] = r0; st[1] = 0; cnt[0] = rows; cnt[1] = row;
            }
            if (p->ndim == 1) { st[0] = u; cnt[0] = k; }
            add_mapping(dcpl, vs, st, cnt, r, "master", hi - lo, p->offset + u - lo, k);
            u += k;
        }
    }
    H5Sselect_all(vs);
    hid_t d = H5Dcreate2(g, p->name, H5T_IEEE_F32LE, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(vs);
    H5Pclose(dcpl);
    return rc;
}

static int write_param_table(hid_t f, const zt_param_table *t) {
    ck_table_row *rows = zt_xcalloc((size_t)t->count, sizeof *rows);
    for (int i = 0; i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        snprintf(rows[i].name, sizeof rows[i].name, "%s", p->name);
        rows[i].ndim = p->ndim;
        rows[i].shape[0] = p->shape[0];
        rows[i].shape[1] = p->ndim == 2 ? p->shape[1] : 0;
        rows[i].offset = p->offset;
        rows[i].numel = p->numel;
        rows[i].segment = p->segment;
        rows[i].decay = p->decay;
    }
    hsize_t n = (hsize_t)t->count;
    hid_t ty = ck_table_row_type(), sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "param_table", ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d >= 0 && H5Dwrite(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0 ? 0 : -1;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(ty);
    free(rows);
    return rc;
}

/* the index's contents, written into the in-memory HDF5 file f */
static int fill_index(hid_t f, const zt_engine *e, const zt_checkpoint_meta *m, const zt_train_state *st,
                      const uint32_t *shard_crc) {
    const zt_gpt2_shape *shape = &m->shape;
    int rc = ck_put_str(f, "format", ZT_CKPT_FORMAT) || ck_put_i64(f, "format_version", m->format_version) ||
             ck_put_i64(f, "step", m->step) || ck_put_i64(f, "tokens_seen", m->tokens_seen) ||
             ck_put_i64(f, "world_size", m->world_size) || ck_put_i64(f, "zero_stage", m->zero_stage) ||
             ck_put_u64(f, "total", m->total) || ck_put_u64(f, "shard", m->shard) || ck_put_i64(f, "adam_t", m->adam_t) ||
             ck_put_str(f, "config", m->config_text) || ck_put_str(f, "model", "gpt2") ||
             ck_put_i64(f, "n_layer", shape->n_layer) || ck_put_i64(f, "n_head", shape->n_head) ||
             ck_put_i64(f, "n_embd", shape->n_embd) || ck_put_i64(f, "vocab_size", shape->vocab_size) ||
             ck_put_i64(f, "n_positions", shape->n_positions) || ck_put_str(f, "run_id", m->run_id) ||
             ck_put_u32s(f, "shard_crc32c", shard_crc, (size_t)m->world_size) ||
             ck_put_u64(f, "metadata_crc32c", ck_meta_digest(m, st, shard_crc));
    hid_t g = rc ? -1 : H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || ck_put_i64(g, "step", st->step) || ck_put_i64(g, "tokens_seen", st->tokens_seen) ||
        ck_put_i64(g, "data_samples", st->data_samples) || ck_put_u64(g, "rng_state", st->rng_state) ||
        ck_put_f64(g, "loss_scale", st->loss_scale) || ck_put_i64(g, "loss_scale_good_steps", st->loss_scale_good_steps) ||
        ck_put_i64(g, "hysteresis_left", st->hysteresis_left))
        rc = -1;
    ck_h5_close(&g);
    if (!rc) rc = write_param_table(f, zt_engine_table(e));
    for (int v = 0; v < 3 && !rc; v++) rc = write_flat_vds(f, ck_vec_names[v], e);
    g = rc ? -1 : H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) rc = -1;
    for (int i = 0; !rc && i < zt_engine_table(e)->count; i++) rc = write_tensor_vds(g, &zt_engine_table(e)->params[i], e);
    ck_h5_close(&g);
    return rc;
}

/* writes n bytes to a new file PATH and fsyncs it */
static int write_bytes(const char *path, const void *data, size_t n, zt_err *err) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
    if (fd < 0) return zt_fail(err, "%s: cannot create: %s", path, strerror(errno));
    const char *p = data;
    int rc = 0;
    while (n && !rc) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) rc = zt_fail(err, "%s: cannot write: %s", path, w < 0 ? strerror(errno) : "no progress");
        else { p += w; n -= (size_t)w; }
    }
    if (!rc && fsync(fd)) rc = zt_fail(err, "%s: fsync failed: %s", path, strerror(errno));
    if (close(fd) && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, strerror(errno));
    return rc;
}

static int write_index(const char *path, const zt_engine *e, const zt_checkpoint_meta *m, const zt_train_state *st,
                       const uint32_t *shard_crc, zt_err *err) {
    hid_t fapl = ck_file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    char why[CK_WHYCAP];
    if (f < 0) return zt_fail(err, "%s: cannot create: %s", path, ck_h5_why(why));
    int rc = fill_index(f, e, m, st, shard_crc);
    if (rc) zt_fail(err, "%s: cannot write the index: %s", path, ck_h5_why(why));
    /* a close that fails (disk full) leaves HDF5 holding the file: main() turns off HDF5's exit-time
     * cleanup, which would crash on it */
    if (H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, ck_h5_why(why));
    if (!rc) rc = ck_fsync_path(path, err);
    return rc;
}

/* ================================================================ publish and prune */

static int write_latest(const char *dir, const char *name, zt_err *err) {
    char tmp[CK_PATHCAP], dst[CK_PATHCAP], line[64];
    if (ck_path_join(tmp, sizeof tmp, dir, "latest.tmp", err) || ck_path_join(dst, sizeof dst, dir, "latest", err)) return -1;
    int len = snprintf(line, sizeof line, "%s\n", name);
    if (write_bytes(tmp, line, (size_t)len, err)) { unlink(tmp); return -1; }
    if (rename(tmp, dst)) return zt_fail(err, "%s: cannot rename to %s: %s", tmp, dst, strerror(errno));
    return ck_fsync_path(dir, err);
}

/* renames TMP (a complete step directory) to FINAL; an existing FINAL (the same step saved again)
 * is swapped out atomically (renameat2 RENAME_EXCHANGE) and then removed */
static int publish_dir(const char *dir, const char *tmp, const char *final, zt_err *err) {
    if (ck_fsync_path(tmp, err)) return -1;
    if (ck_is_dir(final)) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            ck_rmtree(tmp);
        } else { /* file systems without exchange: a short window where FINAL is missing */
            char old[CK_PATHCAP];
            if ((size_t)snprintf(old, sizeof old, "%s.old", tmp) >= sizeof old) return zt_fail(err, "%s: path too long", tmp);
            if (rename(final, old) || rename(tmp, final))
                return zt_fail(err, "%s: cannot replace with %s: %s", final, tmp, strerror(errno));
            ck_rmtree(old);
        }
    } else if (rename(tmp, final)) {
        return zt_fail(err, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    }
    return ck_fsync_path(dir, err);
}

/* Whether pruning may remove step directory P: one this run saved, or one of the run it resumed
 * from (the run id in its index.h5), or any with checkpoint.overwrite. Another run's steps, and a
 * step whose index cannot be read, are never removed. */
static int prunable(const zt_checkpoint_dir *cd, const char *p) {
    if (cd->prune_any) return 1;
    char idx[CK_PATHCAP];
    if (ck_path_join(idx, sizeof idx, p, "index.h5", NULL)) return 0;
    hid_t fapl = ck_file_access();
    hid_t f = H5Fopen(idx, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) return 0;
    char *run_id = NULL;
    int rc = ck_get_str(f, "run_id", &run_id);
    if (rc == -1) run_id = zt_xstrdup(""); /* format version 1: no run id */
    H5Fclose(f);
    int mine = run_id && (!strcmp(run_id, cd->run_id) || (cd->has_lineage && !strcmp(run_id, cd->lineage_run_id)));
    free(run_id);
    return mine;
}

/* keep_last: removes the oldest complete step directories while more than keep_last remain, except
 * KEEP (the one just saved), cd->keep_step (the newest saved before the divergence guard fired)
 * and the steps that are not this run's to remove (prunable). */
static void prune(const zt_checkpoint_dir *cd, const char *keep, int keep_last) {
    if (keep_last <= 0) return;
    ck_step_entry *s;
    int n = ck_list_steps(cd->path, &s), left = n;
    for (int i = 0; i < n && left > keep_last; i++) {
        if (!strcmp(s[i].name, keep) || (cd->keep_step > 0 && s[i].step == cd->keep_step)) continue;
        char p[CK_PATHCAP];
        if (ck_path_join(p, sizeof p, cd->path, s[i].name, NULL) || !prunable(cd, p)) continue;
        if (ck_rmtree(p)) zt_warn("checkpoint: cannot remove old %s: %s", p, strerror(errno));
        left--;
    }
    free(s);
}

/* ================================================================ save */

int zt_checkpoint_save(zt_checkpoint_dir *cd, zt_engine *e, const zt_gpt2_shape *shape, const zt_train_state *st,
                       const char *config_text, int keep_last, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    double t0 = zt_now();
    zt_comm *c = zt_engine_comm(e);
    const char *dir = cd->path;
    char name[64], tmp[CK_PATHCAP], final[CK_PATHCAP], idx[CK_PATHCAP];
    snprintf(name, sizeof name, "step_%08ld", st->step);
    int rc = ck_path_join(final, sizeof final, dir, name, err);
    if (!rc && (size_t)snprintf(tmp, sizeof tmp, "%s/.tmp_%s.%s", dir, name, cd->run_id) >= sizeof tmp)
        rc = zt_fail(err, "%s: path too long", dir);
    if (!rc) rc = ck_path_join(idx, sizeof idx, tmp, "index.h5", err);
    /* phase 1: rank 0 makes an empty temporary directory (removing what failed saves left) */
    int made = 0;
    if (!rc) rc = zt_checkpoint_dir_check(cd, err); /* the directory is still this run's */
    if (!rc && zt_engine_layout_of(e)->rank == 0) {
        ck_rmtree(tmp); /* this run's own earlier failure at the same step */
        if (mkdir(tmp, 0777)) rc = zt_fail(err, "%s: cannot create directory: %s", tmp, strerror(errno));
        made = !rc;
    }
    if (zt_agree(c, rc, err)) goto fail;
    /* phase 2: every rank writes and syncs its file */
    zt_engine_backend(e)->synchronize();
    uint32_t digest = 0;
    rc = write_rank_file(tmp, e, st->step, cd->run_id, &digest, err);
    if (zt_agree(c, rc, err)) goto fail;
    /* rank 0 learns every shard's digest (exact in doubles: 32-bit values) */
    double *dig = zt_xcalloc((size_t)zt_engine_layout_of(e)->world, sizeof *dig);
    dig[zt_engine_layout_of(e)->rank] = digest;
    if (zt_engine_layout_of(e)->world > 1) c->allreduce_host_double(c, dig, zt_engine_layout_of(e)->world);
    uint32_t *shard_crc = zt_xcalloc((size_t)zt_engine_layout_of(e)->world, sizeof *shard_crc);
    for (int r = 0; r < zt_engine_layout_of(e)->world; r++) shard_crc[r] = (uint32_t)dig[r];
    free(dig);
    /* phase 3: rank 0 writes the index */
    if (zt_engine_layout_of(e)->rank == 0) {
        zt_checkpoint_meta m = {ZT_CKPT_VERSION, st->step, st->tokens_seen, zt_engine_steps(e), zt_engine_layout_of(e)->world, zt_engine_layout_of(e)->stage,
                                zt_engine_layout_of(e)->total, zt_engine_layout_of(e)->shard, *shape, (char *)(config_text ? config_text : ""), ""};
        snprintf(m.run_id, sizeof m.run_id, "%s", cd->run_id);
        rc = write_index(idx, e, &m, st, shard_crc, err);
    }
    free(shard_crc);
    if (zt_agree(c, rc, err)) goto fail;
    /* phase 4: rank 0 renames the complete step directory into place */
    if (zt_engine_layout_of(e)->rank == 0) rc = publish_dir(dir, tmp, final, err);
    if (zt_agree(c, rc, err)) goto fail;
    made = 0;
    /* phase 5: `latest` names it; then the oldest are pruned (failures there only warn) */
    if (zt_engine_layout_of(e)->rank == 0) rc = write_latest(dir, name, err);
    if (zt_agree(c, rc, err)) goto fail;
    if (zt_engine_layout_of(e)->rank == 0) prune(cd, name, keep_last);
    double dt = zt_now() - t0, bytes = 12.0 * (double)zt_engine_layout_of(e)->total;
    zt_info("checkpoint: saved %s (%.2f GB in %.2f s, %.2f GB/s)", final, bytes / 1e9, dt, bytes / 1e9 / dt);
    ck_h5_restore(q);
    return 0;
fail:
    if (made) ck_rmtree(tmp);
    ck_h5_restore(q);
    return -1;
}
