/* checkpoint_save.c — writing a checkpoint (layout in checkpoint.h): every rank's file, rank 0's
 * index, the atomic rename into place, `latest`, pruning.
 *
 * One path for every engine: each rank reads its partition of master/m/v through its state view
 * (io/state_view.h: the engine knows whether a piece lives in device memory or, with Twin-Flow
 * offload, in host memory or on NVMe) into a host staging buffer of at most CK_STAGE_ELEMS elements, checksums it and
 * hands it to HDF5 in large contiguous writes with no fill values and no filters.
 * Errors carry the operating system's reason where HDF5 has one ("No space left on device").
 * The save runs in three phases (checkpoint_save.h: start, write, complete), so that an asynchronous
 * save (checkpoint_async.c) runs write on a thread; zt_checkpoint_save is the three in a row.
 * With tensor parallelism the index maps the whole tensors onto every tp rank's files (map_tensor),
 * and the tensors every tp rank holds whole are checked bit-identical across the tp group (hash_whole). */
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
#include "io/checkpoint_manifest.h"
#include "io/checkpoint_save.h"
#include "util/test_hooks.h"

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

/* The guard of tensor parallelism: a tensor every tp rank holds whole (split ZT_TP_WHOLE) must be the
 * same bits on each. Each rank sums a hash of (element index in the tensor, bits) over its range's
 * elements of each such tensor, mod 2^32: the sum does not depend on order, so the sums over each tp
 * rank's data-parallel group compare though the tp ranks' shard boundaries differ. */
static uint32_t element_hash(size_t i, float x) {
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    uint64_t z = (uint64_t)i * 0x9e3779b97f4a7c15ull ^ bits; /* splitmix64's finalizer */
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return (uint32_t)(z ^ (z >> 31));
}

/* adds the hashes of local elements [flat, flat + n) (values x) to sums[tensor] */
static void hash_whole(const zt_param_table *t, size_t flat, const float *x, size_t n, uint32_t *sums) {
    for (int i = 0; i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        size_t a = ck_max(flat, p->offset), b = ck_min(flat + n, p->offset + p->numel);
        uint32_t sum = 0;
        for (size_t j = a; p->split == ZT_TP_WHOLE && j < b; j++) sum += element_hash(j - p->offset, x[j - flat]);
        sums[i] += sum;
    }
}

/* ZEROTRAIN_INJECT_TP_DIVERGE (util/test_hooks.h): this tp rank's copy of ln_f.bias differs, in the
 * lowest bit of its first element of local elements [flat, flat + n) */
static void inject_divergence(const zt_param_table *t, size_t flat, float *x, size_t n) {
    const zt_param_info *p = &t->params[t->count - 1];
    if (!zt_test_hook_tp_diverge(t->tp_rank) || p->offset < flat || p->offset >= flat + n) return;
    uint32_t bits;
    memcpy(&bits, &x[p->offset - flat], sizeof bits);
    bits ^= 1;
    memcpy(&x[p->offset - flat], &bits, sizeof bits);
}

/* Writes dataset NAME: this rank's partition of optimizer vector `which` with its per-chunk CRC32C
 * attributes. Fills crc (ck_max(nch, 1) values) and *chunk; adds to sums (NULL: none) the hashes of
 * hash_whole; records where its raw data lies in the file in rec (the manifest's data extents). */
static int write_vector(hid_t f, const char *path, int which, zt_state_view *sv, float *stage, uint32_t *crc, size_t *chunk,
                        uint32_t *sums, ck_file_record *rec, zt_err *err) {
    const char *name = ck_vec_names[which];
    size_t n = sv->lay.hi - sv->lay.lo, C = ck_chunk_elems(n), nch = (n + C - 1) / C;
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
        sv->state_read(sv->owner, which, sv->lay.lo - sv->lay.opt_lo + x, k, stage);
        /* a checkpoint holds finite state only: a NaN or inf reaching a save (a diverged run with the
         * guard off, corrupted swap contents) fails it, so `latest` stays on the last good checkpoint */
        size_t bad = zt_first_nonfinite(stage, k);
        if (bad < k) {
            char where[160];
            ck_name_element(sv->table, which, sv->lay.lo + x + bad, where, sizeof where);
            rc = nonfinite = zt_fail(err, "%s: not saved: %s is %g, and a checkpoint holds finite state only "
                                          "(latest stays on the last good checkpoint)", path, where, stage[bad]);
            break;
        }
        if (sums && which == ZT_CKPT_MASTER) inject_divergence(sv->table, sv->lay.lo + x, stage, k);
        if (which == ZT_CKPT_MASTER && x == 0 && k && zt_test_hook_save_nan(sv->lay.rank)) stage[0] = NAN;
        ck_crc_chunks(stage, k, C, crc + x / C);
        if (sums) hash_whole(sv->table, sv->lay.lo + x, stage, k, sums);
        rc = write_slab(d, x, k, stage);
    }
    if (!rc && ck_put_u32s(d, "crc32c", crc, nch)) rc = -1;
    if (!rc && ck_put_u64(d, "checksum_chunk", C)) rc = -1;
    if (!rc && ck_put_str(d, "checksum", "crc32c of each checksum_chunk elements (little-endian bytes)")) rc = -1;
    haddr_t at = !rc && n ? H5Dget_offset(d) : HADDR_UNDEF;
    if (at != HADDR_UNDEF) { /* contiguous, allocated: its bytes are the chunk CRCs' to check */
        rec->ext_off[rec->n_ext] = (uint64_t)at;
        rec->ext_len[rec->n_ext++] = (uint64_t)n * sizeof(float);
    }
    char why[CK_WHYCAP];
    if (rc && !nonfinite) zt_fail(err, "%s: cannot write dataset %s (%zu elements): %s", path, name, n, ck_h5_why(why));
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    return rc;
}

/* Writes TMPDIR/rank_NNNNN.h5 (world rank comm->rank) and fsyncs it; *digest gets its shard digest,
 * *rec its manifest record. With tensor parallelism, sums [3][count] gets the hashes of hash_whole. */
static int write_rank_file(const char *tmpdir, zt_state_view *sv, zt_comm *comm, long step, const char *run_id,
                           uint32_t *digest, ck_file_record *rec, uint32_t *sums, zt_err *err) {
    char name[32], path[CK_PATHCAP], why[CK_WHYCAP];
    const zt_param_table *table = sv->table;
    ck_rank_file_name(name, sizeof name, comm->rank);
    if (ck_path_join(path, sizeof path, tmpdir, name, err)) return -1;
    size_t n = sv->lay.hi - sv->lay.lo, C = ck_chunk_elems(n), nch = ck_max((n + C - 1) / C, 1);
    float *stage = sv->be->host_alloc(ck_max(ck_min(n, ck_max(CK_STAGE_ELEMS / C, 1) * C), 1) * sizeof(float));
    if (!stage) return zt_fail(err, "%s: out of host memory for the staging buffer", path);
    hid_t fapl = ck_file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    int rc = 0;
    if (f < 0) rc = zt_fail(err, "%s: cannot create: %s", path, ck_h5_why(why));
    if (!rc && (ck_put_u64(f, "lo", sv->lay.lo) || ck_put_u64(f, "hi", sv->lay.hi) ||
                ck_put_i64(f, "rank", comm->rank) || ck_put_i64(f, "world_size", comm->world) ||
                ck_put_i64(f, "step", step) || ck_put_str(f, "format", ZT_CKPT_FORMAT) || ck_put_str(f, "run_id", run_id) ||
                (table->tp_size > 1 && (ck_put_i64(f, "tp_rank", table->tp_rank) || ck_put_i64(f, "tp_size", table->tp_size)))))
        rc = zt_fail(err, "%s: cannot write attributes: %s", path, ck_h5_why(why));
    uint32_t *crc[3];
    size_t chunk[3], nchs[3];
    for (int v = 0; v < 3; v++) {
        crc[v] = zt_xcalloc(nch, sizeof(uint32_t));
        nchs[v] = n ? (n + C - 1) / C : 0;
    }
    for (int v = 0; v < 3 && !rc; v++)
        rc = write_vector(f, path, v, sv, stage, crc[v], &chunk[v], sums ? sums + (size_t)v * table->count : NULL, rec, err);
    if (!rc) *digest = ck_shard_digest(sv->lay.lo, sv->lay.hi, step, run_id, chunk, crc, nchs);
    for (int v = 0; v < 3; v++) free(crc[v]);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, ck_h5_why(why));
    sv->be->host_free(stage);
    if (!rc) rc = ck_fsync_path(path, err);
    if (!rc) rc = ck_file_digest(path, rec, err);
    return rc;
}

/* ================================================================ index */

/* selects, in a 1-D dataspace, `rows` blocks of `width` elements `pitch` apart from element `start`
 * (one run of rows * width elements when they touch: the plain selection tp 1 checkpoints have
 * always had) */
static void select_rows(hid_t space, size_t start, size_t rows, size_t width, size_t pitch) {
    hsize_t st = start, n = rows * width, stride = pitch, count = rows, block = width;
    if (rows == 1 || width == pitch) H5Sselect_hyperslab(space, H5S_SELECT_SET, &st, NULL, &n, NULL);
    else H5Sselect_hyperslab(space, H5S_SELECT_SET, &st, &stride, &count, &block);
}

/* maps the virtual selection of vspace to elements of rank file `file`'s dataset `dset` (src_len
 * elements): rows blocks of width elements, src_pitch apart, from src_off */
static void add_mapping(hid_t dcpl, hid_t vspace, int file, const char *dset, size_t src_len, size_t src_off,
                        size_t rows, size_t width, size_t src_pitch) {
    char name[32];
    ck_rank_file_name(name, sizeof name, file);
    hsize_t len = src_len;
    hid_t ss = H5Screate_simple(1, &len, NULL);
    select_rows(ss, src_off, rows, width, src_pitch);
    H5Pset_virtual(dcpl, vspace, name, dset, ss);
    H5Sclose(ss);
}

static void vds_layout(int rank, const hsize_t *dims, hid_t *dcpl_out, hid_t *space_out) {
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    float nan = NAN; /* elements whose shard cannot be read show as NaN, not as plausible zeros */
    H5Pset_fill_value(dcpl, H5T_NATIVE_FLOAT, &nan);
    *dcpl_out = dcpl;
    *space_out = H5Screate_simple(rank, dims, NULL);
}

static int create_vds(hid_t loc, const char *name, hid_t vs, hid_t dcpl) {
    H5Sselect_all(vs);
    hid_t d = H5Dcreate2(loc, name, H5T_IEEE_F32LE, vs, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (d >= 0) H5Dclose(d);
    H5Sclose(vs);
    H5Pclose(dcpl);
    return rc;
}

/* flat virtual dataset NAME = tp rank t's local vector NAME: the concatenation of its rank files' NAME
 * (tp 1: the whole vector) */
static int write_local_vds(hid_t loc, const char *name, const ck_partition *part, int t) {
    hsize_t dim = part->tables[t].total;
    hid_t dcpl, vs;
    vds_layout(1, &dim, &dcpl, &vs);
    for (int d = 0; d < part->dp; d++) {
        int file = d * part->tp + t;
        size_t lo, hi;
        ck_partition_range(part, file, &lo, &hi);
        if (hi <= lo) continue;
        hsize_t st = lo, cnt = hi - lo;
        H5Sselect_hyperslab(vs, H5S_SELECT_SET, &st, NULL, &cnt, NULL);
        add_mapping(dcpl, vs, file, name, hi - lo, 0, 1, hi - lo, hi - lo);
    }
    return create_vds(loc, name, vs, dcpl);
}

/* Where the whole tensor's elements are in the rank files: for each tp rank holding a part of it
 * (tp rank 0 for a tensor held whole), each rank file's piece of that part as blocks of whole local
 * rows (a partial first row, whole rows, a partial last row), and each block, in the whole tensor, at
 * its whole row (ROWS: split_lo on) and, for COLUMNS tensors, cut into its pieces' columns
 * [k split_stride + split_lo, + width). Each block goes to map_block. */
typedef struct vds_map {
    hid_t dcpl, vspace;
    const char *dset;           /* the rank files' dataset */
    const zt_param_info *whole; /* the tensor in the whole table */
    int flat;                   /* the virtual dataset is the whole flat vector (else the tensor, HF shape) */
} vds_map;

static void map_block(const vds_map *m, int file, size_t src_len, size_t src_off, size_t src_pitch, size_t rows,
                      size_t width, size_t wrow, size_t wcol) {
    const zt_param_info *w = m->whole;
    size_t wcols = (size_t)zt_param_full_cols(w);
    if (m->flat) {
        select_rows(m->vspace, w->offset + wrow * wcols + wcol, rows, width, wcols);
    } else {
        hsize_t st[2] = {wrow, wcol}, cnt[2] = {rows, width};
        if (w->ndim == 1) { st[0] = wcol; cnt[0] = width; }
        H5Sselect_hyperslab(m->vspace, H5S_SELECT_SET, st, NULL, cnt, NULL);
    }
    add_mapping(m->dcpl, m->vspace, file, m->dset, src_len, src_off, rows, width, src_pitch);
}

static void map_tensor(const vds_map *m, const ck_partition *part, int i) {
    int holders = part->tables[0].params[i].split == ZT_TP_WHOLE ? 1 : part->tp;
    for (int t = 0; t < holders; t++) {
        const zt_param_info *p = &part->tables[t].params[i];
        size_t row = (size_t)zt_param_cols(p);
        for (int d = 0; d < part->dp; d++) {
            int file = d * part->tp + t;
            size_t lo, hi;
            ck_partition_range(part, file, &lo, &hi);
            /* (wte's padding rows past the vocabulary map nowhere) */
            size_t x = ck_max(lo, p->offset), y = ck_min(hi, p->offset + (size_t)zt_tp_rows_in_whole(p) * row);
            for (size_t u = x - p->offset, w = y - p->offset; x < y && u < w;) {
                size_t r0 = u / row, c0 = u % row, rows = 1, k;
                if (c0 || w - u < row) {
                    k = ck_min(row - c0, w - u);
                } else {
                    rows = (w - u) / row;
                    k = row;
                }
                size_t src = p->offset + u - lo, wrow = (size_t)zt_tp_whole_row(p, (int)r0);
                if (p->split != ZT_TP_COLUMNS) {
                    map_block(m, file, hi - lo, src, row, rows, k, wrow, c0);
                } else { /* the block's columns [c0, c0 + k) cut by the pieces of width row / pieces */
                    size_t width = row / (size_t)p->split_pieces;
                    for (int piece = 0; piece < p->split_pieces; piece++) {
                        size_t a = ck_max(c0, piece * width), b = ck_min(c0 + k, (piece + 1) * width);
                        if (a < b)
                            map_block(m, file, hi - lo, src + (a - c0), row, rows, b - a, wrow,
                                      (size_t)piece * p->split_stride + p->split_lo + (a - piece * width));
                    }
                }
                u += rows * k;
            }
        }
    }
}

/* The whole flat vector NAME[total]: tp 1, the concatenation of the rank files (write_local_vds);
 * with tensor parallelism, tensor by tensor from every tp rank's parts (map_tensor). */
static int write_flat_vds(hid_t f, const char *name, const zt_param_table *whole, const ck_partition *part) {
    if (part->tp == 1) return write_local_vds(f, name, part, 0);
    hsize_t dim = whole->total;
    vds_map m = {-1, -1, name, NULL, 1};
    vds_layout(1, &dim, &m.dcpl, &m.vspace);
    for (int i = 0; i < whole->count; i++) {
        m.whole = &whole->params[i];
        map_tensor(&m, part, i);
    }
    return create_vds(f, name, m.vspace, m.dcpl);
}

/* params/NAME: one tensor of the master weights in its Hugging Face shape. A tensor that spans
 * shards (or starts mid-row in one) maps as up to three hyperslabs per shard and column piece: a
 * partial first row, whole rows, a partial last row. */
static int write_tensor_vds(hid_t g, const zt_param_table *whole, int i, const ck_partition *part) {
    const zt_param_info *w = &whole->params[i];
    hsize_t dims[2] = {(hsize_t)w->shape[0], w->ndim == 2 ? (hsize_t)w->shape[1] : 1};
    vds_map m = {-1, -1, "master", w, 0};
    vds_layout(w->ndim, dims, &m.dcpl, &m.vspace);
    map_tensor(&m, part, i);
    return create_vds(g, w->name, m.vspace, m.dcpl);
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

/* the lineage attribute (checkpoint.h): m's run ids, space-separated */
static int put_lineage(hid_t f, const zt_checkpoint_meta *m) {
    zt_sb text = {0};
    for (int i = 0; i < m->n_lineage; i++) zt_sb_printf(&text, "%s%s", i ? " " : "", m->lineage[i]);
    int rc = ck_put_str(f, "lineage", text.p ? text.p : "");
    free(text.p);
    return rc;
}

/* the index's contents, written into the in-memory HDF5 file f */
static int fill_index(hid_t f, const zt_param_table *whole, const ck_partition *part, const zt_checkpoint_meta *m,
                      const zt_train_state *st, const uint32_t *shard_crc) {
    const zt_gpt2_shape *shape = &m->shape;
    int rc = ck_put_str(f, "format", ZT_CKPT_FORMAT) || ck_put_i64(f, "format_version", m->format_version) ||
             ck_put_i64(f, "step", m->step) || ck_put_i64(f, "tokens_seen", m->tokens_seen) ||
             ck_put_i64(f, "world_size", m->world_size) || ck_put_i64(f, "zero_stage", m->zero_stage) ||
             ck_put_u64(f, "total", m->total) || ck_put_u64(f, "shard", m->shard) || ck_put_i64(f, "adam_t", m->adam_t) ||
             ck_put_str(f, "config", m->config_text) || ck_put_model(f, shape) ||
             ck_put_i64(f, "n_layer", shape->n_layer) || ck_put_i64(f, "n_head", shape->n_head) ||
             ck_put_i64(f, "n_embd", shape->n_embd) || ck_put_i64(f, "vocab_size", shape->vocab_size) ||
             ck_put_i64(f, "n_positions", shape->n_positions) || ck_put_str(f, "run_id", m->run_id) ||
             ck_put_u32s(f, "shard_crc32c", shard_crc, (size_t)m->world_size) ||
             (part->tp > 1 && (ck_put_i64(f, "tensor_parallel", part->tp) ||
                               ck_put_u64s(f, "tp_shard", part->shard, (size_t)part->tp))) ||
             ck_put_u64(f, "metadata_crc32c", ck_meta_digest(m, st, shard_crc));
    hid_t g = rc ? -1 : H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || ck_put_i64(g, "step", st->step) || ck_put_i64(g, "tokens_seen", st->tokens_seen) ||
        ck_put_i64(g, "data_samples", st->data_samples) || ck_put_u64(g, "rng_state", st->rng_state) ||
        ck_put_f64(g, "loss_scale", st->loss_scale) || ck_put_i64(g, "loss_scale_good_steps", st->loss_scale_good_steps) ||
        ck_put_i64(g, "hysteresis_left", st->hysteresis_left))
        rc = -1;
    ck_h5_close(&g);
    if (!rc) rc = put_lineage(f, m);
    if (!rc) rc = write_param_table(f, whole);
    for (int v = 0; v < 3 && !rc; v++) rc = write_flat_vds(f, ck_vec_names[v], whole, part);
    g = rc ? -1 : H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) rc = -1;
    for (int i = 0; !rc && i < whole->count; i++) rc = write_tensor_vds(g, whole, i, part);
    ck_h5_close(&g);
    /* tensor parallelism: each tp rank's local vectors, which the reader reads (tp_local/T/NAME) */
    g = rc || part->tp == 1 ? -1 : H5Gcreate2(f, "tp_local", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (!rc && part->tp > 1 && g < 0) rc = -1;
    for (int t = 0; !rc && t < part->tp && part->tp > 1; t++) {
        char name[16];
        snprintf(name, sizeof name, "%d", t);
        hid_t gt = H5Gcreate2(g, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        if (gt < 0) rc = -1;
        for (int v = 0; v < 3 && !rc; v++) rc = write_local_vds(gt, ck_vec_names[v], part, t);
        ck_h5_close(&gt);
    }
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

static int write_index(const char *path, const zt_param_table *whole, const ck_partition *part,
                       const zt_checkpoint_meta *m, const zt_train_state *st, const uint32_t *shard_crc, zt_err *err) {
    hid_t fapl = ck_file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    char why[CK_WHYCAP];
    if (f < 0) return zt_fail(err, "%s: cannot create: %s", path, ck_h5_why(why));
    int rc = fill_index(f, whole, part, m, st, shard_crc);
    if (rc) zt_fail(err, "%s: cannot write the index: %s", path, ck_h5_why(why));
    /* a close that fails (disk full) leaves HDF5 holding the file: main() turns off HDF5's exit-time
     * cleanup, which would crash on it */
    if (H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, ck_h5_why(why));
    if (!rc) rc = ck_fsync_path(path, err);
    return rc;
}

/* TMP/manifest (checkpoint_manifest.c): the index's size and CRC, and the rank files' records */
static int write_manifest(const char *tmp, const char *idx, const ck_file_record *files, int world, zt_err *err) {
    ck_file_record index = {0};
    char path[CK_PATHCAP];
    if (ck_file_digest(idx, &index, err) || ck_path_join(path, sizeof path, tmp, CK_MANIFEST, err)) return -1;
    char *text = ck_manifest_text(&index, files, world);
    int rc = write_bytes(path, text, strlen(text), err);
    free(text);
    return rc;
}

/* ================================================================ publish (keep_last's prune: checkpoint_dir.c) */

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

/* The lineage this save records: this run, then the runs it descends from (a version-1 ancestor
 * has no run id to record), the oldest dropped beyond ZT_CKPT_LINEAGE_MAX. */
static void lineage_of_save(const zt_checkpoint_dir *cd, zt_checkpoint_meta *m) {
    snprintf(m->lineage[0], sizeof m->lineage[0], "%s", cd->run_id);
    m->n_lineage = 1;
    for (int i = 0; i < cd->n_lineage && m->n_lineage < ZT_CKPT_LINEAGE_MAX; i++)
        if (cd->lineage[i][0]) memcpy(m->lineage[m->n_lineage++], cd->lineage[i], sizeof m->lineage[0]);
}

int zt_checkpoint_set_aside(const zt_checkpoint_dir *cd, const long *steps, int n, long good, zt_err *err) {
    char name[64], from[CK_PATHCAP], to[CK_PATHCAP];
    for (int i = 0; i < n; i++) {
        snprintf(name, sizeof name, "step_%08ld", steps[i]);
        if (ck_path_join(from, sizeof from, cd->path, name, err)) return -1;
        snprintf(name, sizeof name, "unconfirmed_step_%08ld", steps[i]);
        if (ck_path_join(to, sizeof to, cd->path, name, err)) return -1;
        if (!ck_is_dir(from)) continue;
        if (ck_is_dir(to)) ck_rmtree(to); /* set aside by an earlier rollback of this run */
        if (rename(from, to)) return zt_fail(err, "%s: cannot rename to %s: %s", from, to, strerror(errno));
    }
    if (good > 0) {
        snprintf(name, sizeof name, "step_%08ld", good);
        return write_latest(cd->path, name, err);
    }
    if (ck_path_join(from, sizeof from, cd->path, "latest", err)) return -1;
    if (unlink(from) && errno != ENOENT) return zt_fail(err, "%s: cannot remove: %s", from, strerror(errno));
    return ck_fsync_path(cd->path, err);
}

/* ================================================================ save */

/* The tp ranks' hashes of the tensors they all hold whole (hash_whole, summed over each one's
 * data-parallel group: sums [3][tp][count]) must agree: -1 naming the first that does not. */
static int check_whole_tensors(const zt_param_table *t, const double *sums, int tp, zt_err *err) {
    for (int v = 0; v < 3; v++)
        for (int i = 0; i < t->count; i++) {
            if (t->params[i].split != ZT_TP_WHOLE) continue;
            const double *s = sums + (size_t)v * tp * t->count + i;
            for (int r = 1; r < tp; r++)
                if (fmod(s[(size_t)r * t->count], 4294967296.0) != fmod(s[0], 4294967296.0))
                    return zt_fail(err, "checkpoint not saved: %s of %s differs between tensor-parallel ranks 0 and %d, "
                                        "which must hold the same whole tensor (a bug: latest stays on the last good "
                                        "checkpoint)", ck_vec_names[v], t->params[i].name, r);
        }
    return 0;
}

/* One save between its phases (checkpoint_save.h): what start decided, and what write left for complete. */
struct zt_save_job {
    zt_checkpoint_dir *cd;
    zt_state_view sv; /* what write reads: the engine's view, or checkpoint_async.c's snapshot of it */
    zt_comm *c;
    zt_gpt2_shape shape;
    zt_train_state st;
    const char *config_text;
    int keep_last, made; /* made: rank 0 made tmp (removed again unless published) */
    char name[64], tmp[CK_PATHCAP], final[CK_PATHCAP], idx[CK_PATHCAP];
    double t0, written_s;
    /* write's outcome */
    int rc;
    zt_err err;
    uint32_t digest, *sums;
    ck_file_record mine;
    /* gather's: every rank's shard digest and manifest record, each tp rank's shard (rank 0 publishes
     * with them); publish's outcome in rc and err */
    uint32_t *shard_crc;
    ck_file_record *files;
    size_t tp_shard[ZT_MAX_TP], whole_total;
};

static void job_free(zt_save_job *j) {
    if (j->made) ck_rmtree(j->tmp);
    free(j->sums);
    free(j->shard_crc);
    free(j->files);
    free(j);
}

long zt_save_job_step(const zt_save_job *j) { return j->st.step; }
double zt_save_job_written_seconds(const zt_save_job *j) { return j->written_s; }

zt_save_job *zt_checkpoint_save_start(zt_checkpoint_dir *cd, const zt_state_view *sv, zt_comm *c, const zt_gpt2_shape *shape,
                                      const zt_train_state *st, const char *config_text, int keep_last, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    zt_save_job *j = zt_xcalloc(1, sizeof *j);
    *j = (zt_save_job){.cd = cd, .sv = *sv, .c = c, .shape = *shape, .st = *st, .config_text = config_text,
                       .keep_last = keep_last, .t0 = zt_now()};
    const zt_engine_layout *lay = &sv->lay;
    const zt_param_table *table = sv->table;
    int tp = table->tp_size;
    const char *dir = cd->path;
    snprintf(j->name, sizeof j->name, "step_%08ld", st->step);
    int rc = ck_path_join(j->final, sizeof j->final, dir, j->name, err);
    if (!rc && (size_t)snprintf(j->tmp, sizeof j->tmp, "%s/.tmp_%s.%s", dir, j->name, cd->run_id) >= sizeof j->tmp)
        rc = zt_fail(err, "%s: path too long", dir);
    if (!rc) rc = ck_path_join(j->idx, sizeof j->idx, j->tmp, "index.h5", err);
    /* the files are named by world rank: the layout must be the one the index describes */
    if (!rc && (c->world != lay->world * tp || c->rank != lay->rank * tp + table->tp_rank))
        rc = zt_fail(err, "checkpoint: rank %d of %d is not data-parallel rank %d of %d, tensor-parallel rank %d of %d "
                          "(world rank = data-parallel rank x tp + tp rank)", c->rank, c->world, lay->rank, lay->world,
                     table->tp_rank, tp);
    /* phase 1: rank 0 makes an empty temporary directory (removing what failed saves left) */
    if (!rc) rc = zt_checkpoint_dir_check(cd, err); /* the directory is still this run's */
    if (!rc && c->rank == 0) {
        ck_rmtree(j->tmp); /* this run's own earlier failure at the same step */
        if (mkdir(j->tmp, 0777)) rc = zt_fail(err, "%s: cannot create directory: %s", j->tmp, strerror(errno));
        j->made = !rc;
    }
    ck_h5_restore(q);
    if (zt_agree(c, rc, err)) {
        job_free(j);
        return NULL;
    }
    sv->be->synchronize(); /* the state the view reads is the step's */
    return j;
}

void zt_checkpoint_save_write(zt_save_job *j) {
    ck_h5_quiet q = ck_h5_silence(); /* HDF5's error handler is per thread (a thread-safe build) */
    double t = zt_now();
    int tp = j->sv.table->tp_size;
    j->sums = tp > 1 ? zt_xcalloc((size_t)3 * j->sv.table->count, sizeof *j->sums) : NULL;
    j->rc = write_rank_file(j->tmp, &j->sv, j->c, j->st.step, j->cd->run_id, &j->digest, &j->mine, j->sums, &j->err);
    j->written_s = zt_now() - t;
    ck_h5_restore(q);
}

void zt_checkpoint_save_abandon(zt_save_job *j) {
    if (j) job_free(j);
}

int zt_checkpoint_save_gather(zt_save_job *j, zt_err *err) {
    zt_comm *c = j->c;
    const zt_state_view *sv = &j->sv;
    const zt_engine_layout *lay = &sv->lay;
    const zt_param_table *table = sv->table;
    int tp = table->tp_size, count = table->count, rc = j->rc;
    if (rc) *err = j->err;
    /* every rank learns every shard's digest, each tp rank's shard and the tp ranks' hashes of their
     * whole tensors (exact in doubles: 32-bit values, and sums of fewer than 2^21 of them), how
     * many ranks failed to write their file, and each file's manifest record (sizes and offsets below
     * 2^53): one collective between the steps, not two (the failing rank's message travels only when
     * there is one) */
    enum { REC_DOUBLES = 3 + 2 * CK_MAX_EXTENTS };
    size_t n_sums = tp > 1 ? (size_t)3 * tp * count : 0;
    size_t n = (size_t)c->world + (size_t)tp + n_sums + 1 + (size_t)REC_DOUBLES * c->world;
    double *all = zt_xcalloc(n, sizeof *all), *shards = all + c->world, *hashes = shards + tp;
    double *failed = hashes + n_sums, *recs = failed + 1;
    double *my_rec = recs + (size_t)REC_DOUBLES * c->rank;
    const ck_file_record *mine = &j->mine;
    my_rec[0] = (double)mine->bytes;
    my_rec[1] = mine->crc;
    my_rec[2] = mine->n_ext;
    for (int e = 0; e < mine->n_ext; e++) {
        my_rec[3 + 2 * e] = (double)mine->ext_off[e];
        my_rec[4 + 2 * e] = (double)mine->ext_len[e];
    }
    all[c->rank] = j->digest;
    *failed = rc != 0;
    if (lay->rank == 0) shards[table->tp_rank] = (double)lay->shard;
    for (int v = 0; v < 3 && j->sums; v++)
        for (int i = 0; i < count; i++) hashes[((size_t)v * tp + table->tp_rank) * count + i] = j->sums[(size_t)v * count + i];
    if (c->world > 1) c->allreduce_host_double(c, all, (int)n);
    if (*failed > 0) { /* every rank saw the count: every rank takes this branch */
        free(all);
        zt_agree(c, rc, err);
        job_free(j);
        return -1;
    }
    j->shard_crc = zt_xcalloc((size_t)c->world, sizeof *j->shard_crc);
    for (int r = 0; r < c->world; r++) j->shard_crc[r] = (uint32_t)all[r];
    j->files = zt_xcalloc((size_t)c->world, sizeof *j->files);
    for (int r = 0; r < c->world; r++) {
        const double *x = recs + (size_t)REC_DOUBLES * r;
        j->files[r].bytes = (uint64_t)x[0];
        j->files[r].crc = (uint32_t)x[1];
        j->files[r].n_ext = (int)x[2];
        for (int e = 0; e < j->files[r].n_ext && e < CK_MAX_EXTENTS; e++) {
            j->files[r].ext_off[e] = (uint64_t)x[3 + 2 * e];
            j->files[r].ext_len[e] = (uint64_t)x[4 + 2 * e];
        }
    }
    for (int t = 0; t < tp; t++) j->tp_shard[t] = (size_t)shards[t];
    /* the same sums on every rank: the same outcome, no agreement needed */
    rc = tp > 1 ? check_whole_tensors(table, hashes, tp, err) : 0;
    free(all);
    if (rc) {
        job_free(j);
        return -1;
    }
    j->whole_total = lay->total; /* tp 1; else the whole model's (rank 0's publish sets it), for the message */
    return 0;
}

void zt_checkpoint_save_publish(zt_save_job *j) {
    ck_h5_quiet q = ck_h5_silence();
    zt_comm *c = j->c;
    zt_checkpoint_dir *cd = j->cd;
    const zt_state_view *sv = &j->sv;
    const zt_param_table *table = sv->table;
    const zt_train_state *st = &j->st;
    int tp = table->tp_size, rc = 0;
    zt_err *err = &j->err;
    /* phase 3: rank 0 writes the index */
    if (c->rank == 0) {
        zt_param_table whole_built = {0};
        ck_partition part = {0};
        rc = zt_gpt2_param_table(&whole_built, &j->shape, err) ||
                     ck_partition_make(&part, &j->shape, c->world, tp, j->tp_shard, err) ? -1 : 0;
        /* tp 1: the engine's own table (its segments), as checkpoints have always recorded it */
        const zt_param_table *whole = tp == 1 ? table : &whole_built;
        j->whole_total = whole->total;
        zt_checkpoint_meta m = {tp > 1 ? ZT_CKPT_VERSION_TP : ZT_CKPT_VERSION, st->step, st->tokens_seen,
                                sv->steps, c->world, sv->lay.stage, whole->total, j->tp_shard[0], j->shape,
                                (char *)(j->config_text ? j->config_text : ""), "", tp, {0}, {{0}}, 0};
        memcpy(m.tp_shard, j->tp_shard, sizeof j->tp_shard);
        snprintf(m.run_id, sizeof m.run_id, "%s", cd->run_id);
        lineage_of_save(cd, &m);
        if (!rc) rc = write_index(j->idx, whole, &part, &m, st, j->shard_crc, err);
        if (!rc) rc = write_manifest(j->tmp, j->idx, j->files, c->world, err);
        ck_partition_free(&part);
        zt_param_table_free(&whole_built);
    }
    /* phase 4: rank 0 renames the complete step directory into place; phase 5: `latest` names it.
     * Phases 3-5 are rank 0's alone, each only after the one before succeeded, so the ranks agree
     * once on the three (finish): they return after `latest` names the step or with the phase that
     * failed. */
    if (!rc && c->rank == 0) {
        rc = publish_dir(cd->path, j->tmp, j->final, err);
        if (!rc) {
            j->made = 0;
            rc = write_latest(cd->path, j->name, err);
        }
    }
    j->rc = rc;
    ck_h5_restore(q);
}

int zt_checkpoint_save_finish(zt_save_job *j, zt_err *err) {
    zt_comm *c = j->c;
    zt_checkpoint_dir *cd = j->cd;
    if (j->rc) *err = j->err;
    if (zt_agree(c, j->rc, err)) {
        job_free(j);
        return -1;
    }
    /* then the oldest are pruned (failures there only warn) */
    if (c->rank == 0) ck_prune(cd, j->name, j->keep_last);
    double dt = zt_now() - j->t0, bytes = 12.0 * (double)j->whole_total;
    zt_info("checkpoint: saved %s (%.2f GB in %.2f s, %.2f GB/s)", j->final, bytes / 1e9, dt, bytes / 1e9 / dt);
    job_free(j);
    return 0;
}

int zt_checkpoint_save_complete(zt_save_job *j, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    int rc = zt_checkpoint_save_gather(j, err);
    if (!rc) {
        zt_checkpoint_save_publish(j);
        rc = zt_checkpoint_save_finish(j, err);
    }
    ck_h5_restore(q);
    return rc;
}

int zt_checkpoint_save(zt_checkpoint_dir *cd, zt_state_view *sv, zt_comm *c, const zt_gpt2_shape *shape,
                       const zt_train_state *st, const char *config_text, int keep_last, zt_err *err) {
    zt_save_job *j = zt_checkpoint_save_start(cd, sv, c, shape, st, config_text, keep_last, err);
    if (!j) return -1;
    zt_checkpoint_save_write(j);
    return zt_checkpoint_save_complete(j, err);
}
