/* checkpoint_read.c — reading a checkpoint: opening and validating index.h5 (format, version,
 * metadata checksum, parameter table against the saved shape, every rank file present), and
 * checksum-verified reads of any element range through the index's virtual datasets. Used by
 * load (checkpoint_load.c), `export`, `info` and `sample`. No file reaches HDF5 before the step's
 * manifest (checkpoint_manifest.c) has verified it: index.h5 at open, each rank file when first read.
 * The pass that checks a chunk's CRC also refuses a non-finite value (a save never writes one).
 *
 * A reader that needs elements [a, b) reads the whole chunks covering them (at most one extra chunk
 * at each end of each shard it touches) and verifies exactly those: resharded loads and
 * single-tensor exports never read more than they use plus 2 chunks per shard, and every byte they
 * use is verified. A rank file's chunk CRCs are trusted only once its run id and digest match the
 * index's (format version 2), so shards of another save are refused.
 *
 * Tensor parallelism (format version 3): the ranges above are of one tp rank's local vector, read
 * through the index's tp_local/T datasets; the whole layout (zt_checkpoint_read, export, load at
 * another tp size) is assembled a few whole rows at a time, each tp rank's rows put in with
 * zt_tp_put_row. */
#define _GNU_SOURCE
#include "io/checkpoint_internal_read.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

void zt_checkpoint_meta_free(zt_checkpoint_meta *m) {
    free(m->config_text);
    m->config_text = NULL;
}

void zt_checkpoint_close(zt_checkpoint_reader *r) {
    if (!r) return;
    ck_h5_quiet q = ck_h5_silence();
    for (int t = 0; t < ZT_MAX_TP; t++)
        for (int v = 0; v < 3; v++) ck_h5_close(&r->vds[t][v]);
    ck_h5_close(&r->index);
    ck_h5_restore(q);
    for (int s = 0; r->src && s < r->meta.world_size; s++)
        for (int v = 0; v < 3; v++) free(r->src[s].crc[v]);
    free(r->src);
    free(r->shard_crc);
    free(r->files);
    if (r->stage) { if (r->stage_be) r->stage_be->host_free(r->stage); else free(r->stage); }
    free(r->rows);
    free(r->part_rows);
    ck_partition_free(&r->part);
    zt_param_table_free(&r->table);
    zt_checkpoint_meta_free(&r->meta);
    free(r);
}

const zt_checkpoint_meta *zt_checkpoint_reader_meta(const zt_checkpoint_reader *r) { return &r->meta; }
const zt_param_table *zt_checkpoint_reader_table(const zt_checkpoint_reader *r) { return &r->table; }
void zt_checkpoint_reader_state(const zt_checkpoint_reader *r, zt_train_state *st) { *st = r->state; }

static void rank_path(const zt_checkpoint_reader *r, int s, char *buf, size_t cap) {
    char name[32];
    ck_rank_file_name(name, sizeof name, s);
    snprintf(buf, cap, "%s/%s", r->dir, name);
}

size_t zt_checkpoint_file_bytes(const zt_checkpoint_reader *r, int rank) {
    char p[CK_PATHCAP];
    rank_path(r, rank, p, sizeof p);
    struct stat st;
    return stat(p, &st) == 0 ? (size_t)st.st_size : 0;
}

/* the message for an attribute that ck_get_* could not read (rc -1: missing, -2: damaged) */
static int attr_fail(zt_err *err, const char *path, const char *what, int rc) {
    char why[CK_WHYCAP];
    if (rc == -2) return zt_fail(err, "%s: damaged: cannot read %s: %s", path, what, ck_h5_why(why));
    return zt_fail(err, "%s: missing or invalid %s", path, what);
}

/* the saved parameter table must be exactly the one the saved shape defines */
static int check_saved_table(zt_checkpoint_reader *r, zt_err *err) {
    const char *path = r->index_path;
    char why[CK_WHYCAP];
    hid_t d = H5Dopen2(r->index, "param_table", H5P_DEFAULT);
    if (d < 0) return zt_fail(err, "%s: no readable dataset param_table: %s", path, ck_h5_why(why));
    hid_t sp = H5Dget_space(d), ty = ck_table_row_type();
    size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
    ck_table_row *rows = zt_xcalloc(ck_max(n, 1), sizeof *rows);
    int rc = H5Dread(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0 ? -1 : 0;
    H5Tclose(ty);
    H5Sclose(sp);
    H5Dclose(d);
    if (rc) { free(rows); return zt_fail(err, "%s: damaged: cannot read param_table: %s", path, ck_h5_why(why)); }
    const zt_param_table *t = &r->table;
    if ((int)n != t->count) rc = zt_fail(err, "%s: param_table has %zu tensors, the saved model shape defines %d", path, n, t->count);
    for (int i = 0; !rc && i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        rows[i].name[sizeof rows[i].name - 1] = 0;
        char shown[256];
        /* every column but segment: the saving engine's cut into gradient segments (tiling, embedding
         * rows), which loads do not use and nothing here can recompute; the manifest covers its bytes */
        if (strcmp(rows[i].name, p->name) || rows[i].offset != p->offset || rows[i].numel != p->numel ||
            rows[i].ndim != p->ndim || rows[i].shape[0] != p->shape[0] || (p->ndim == 2 && rows[i].shape[1] != p->shape[1]) ||
            rows[i].decay != p->decay)
            rc = zt_fail(err, "%s: param_table row %d (%s) does not match the saved model shape", path, i,
                         zt_escape_str(rows[i].name, shown, sizeof shown));
    }
    free(rows);
    return rc;
}

hid_t ck_open_h5(const char *path, zt_err *err, const char *missing) {
    char why[CK_WHYCAP];
    if (!ck_is_file(path)) {
        zt_fail(err, missing, path);
        return -1;
    }
#if H5_VERSION_GE(1, 12, 0)
    htri_t ok = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t ok = H5Fis_hdf5(path);
#endif
    if (ok <= 0) {
        zt_fail(err, "%s: not a readable HDF5 file (%s)", path, ok < 0 ? ck_h5_why(why) : "no HDF5 signature");
        H5Eclear2(H5E_DEFAULT);
        return -1;
    }
    hid_t fapl = ck_file_access();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) zt_fail(err, "%s: cannot open (truncated or damaged?): %s", path, ck_h5_why(why));
    return f;
}

/* group state: the trainer state */
static int read_state(zt_checkpoint_reader *r, zt_err *err) {
    const char *path = r->index_path;
    htri_t has = H5Lexists(r->index, "state", H5P_DEFAULT);
    hid_t g = has > 0 ? H5Gopen2(r->index, "state", H5P_DEFAULT) : -1;
    char why[CK_WHYCAP];
    if (has == 0) return zt_fail(err, "%s: no group state", path);
    if (g < 0) return zt_fail(err, "%s: damaged: cannot open group state: %s", path, ck_h5_why(why));
    long long a[5] = {0};
    static const char *const keys[5] = {"step", "tokens_seen", "data_samples", "loss_scale_good_steps", "hysteresis_left"};
    unsigned long long rng = 0;
    double ls = 1;
    int rc = 0;
    const char *bad = NULL;
    for (int i = 0; i < 5 && !rc; i++) if ((rc = ck_get_i64(g, keys[i], &a[i]))) bad = keys[i];
    if (!rc && (rc = ck_get_u64(g, "rng_state", &rng))) bad = "rng_state";
    if (!rc && (rc = ck_get_f64(g, "loss_scale", &ls))) bad = "loss_scale";
    if (rc) {
        char what[64];
        snprintf(what, sizeof what, "attribute state/%s", bad);
        attr_fail(err, path, what, rc);
    }
    H5Gclose(g);
    if (rc) return -1;
    zt_train_state st = {a[0], a[1], a[2], rng, ls, (int)a[3], (int)a[4]};
    r->state = st;
    return 0;
}

/* a run id as zt_checkpoint_dir_open makes them: 16 lowercase hex digits */
static int is_run_id(const char *s, size_t n) {
    if (n != 16) return 0;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'))) return 0;
    return 1;
}

/* m->lineage from the index's lineage attribute (checkpoint.h); without one (saved before lineages,
 * version 1), or one that is not this run id followed by run ids: run_id alone. The attribute is
 * not checksummed: a damaged one warns and only makes keep_last prune less, never more. */
static void read_lineage(zt_checkpoint_reader *r) {
    zt_checkpoint_meta *m = &r->meta;
    char *text = NULL;
    int rc = r->meta.format_version >= 2 ? ck_get_str(r->index, "lineage", &text) : -1;
    int n = 0, ok = rc == 0;
    for (const char *p = text; ok && *p;) {
        size_t len = strcspn(p, " ");
        ok = n < ZT_CKPT_LINEAGE_MAX && is_run_id(p, len) &&
             (n > 0 || (!strncmp(p, m->run_id, len) && m->run_id[len] == 0)) && /* lineage[0] is run_id */
             (p[len] == 0 || p[len + 1] != 0);                                 /* one blank between ids */
        if (ok) snprintf(m->lineage[n++], sizeof m->lineage[0], "%.*s", (int)len, p);
        p += len + (p[len] == ' ');
    }
    if (rc != -1 && (!ok || n == 0)) /* there, but unreadable or not a lineage */
        zt_warn("checkpoint: %s: attribute lineage is not run id %s followed by at most %d run ids: its lineage is "
                "taken as that run alone (keep_last leaves the steps of the runs before it)", r->index_path, m->run_id,
                ZT_CKPT_LINEAGE_MAX - 1);
    if (!ok || n == 0) {
        snprintf(m->lineage[0], sizeof m->lineage[0], "%s", m->run_id);
        n = 1;
    }
    m->n_lineage = n;
    free(text);
}

static int read_meta(zt_checkpoint_reader *r, zt_err *err) {
    const char *path = r->index_path;
    hid_t f = r->index;
    char *fmt = NULL;
    int rc = ck_get_str(f, "format", &fmt);
    int ours = !rc && !strcmp(fmt, ZT_CKPT_FORMAT);
    free(fmt);
    if (rc == -2) return attr_fail(err, path, "attribute format", rc);
    if (!ours) return zt_fail(err, "%s: not a zerotrain checkpoint", path);
    long long ver = 0;
    if ((rc = ck_get_i64(f, "format_version", &ver))) return attr_fail(err, path, "attribute format_version", rc);
    if (ver < 1 || ver > ZT_CKPT_VERSION_TP)
        return zt_fail(err, "%s: checkpoint format version %lld is not supported (this zerotrain reads versions 1 to %d)",
                       path, ver, ZT_CKPT_VERSION_TP);
    zt_checkpoint_meta *m = &r->meta;
    m->format_version = (int)ver;
    long long v[12];
    static const char *const keys[12] = {"step", "tokens_seen", "adam_t", "world_size", "zero_stage", "total",
                                         "shard", "n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    for (int i = 0; i < 12; i++) {
        char what[64];
        snprintf(what, sizeof what, "attribute %s", keys[i]);
        if ((rc = ck_get_i64(f, keys[i], &v[i]))) return attr_fail(err, path, what, rc);
    }
    m->step = v[0]; m->tokens_seen = v[1]; m->adam_t = v[2];
    m->world_size = (int)v[3]; m->zero_stage = (int)v[4];
    m->total = (size_t)v[5]; m->shard = (size_t)v[6];
    zt_gpt2_shape s = {.n_layer = (int)v[7], .n_head = (int)v[8], .n_embd = (int)v[9], .vocab_size = (int)v[10],
                       .n_positions = (int)v[11]};
    s.padded_vocab = (s.vocab_size + 127) / 128 * 128;
    if (ck_get_model(f, path, &s, err)) return -1;
    m->shape = s;
    if ((rc = ck_get_str(f, "config", &m->config_text)) == -2) return attr_fail(err, path, "attribute config", rc);
    if (!m->config_text) m->config_text = zt_xstrdup("");
    if (v[3] < 1 || v[3] > 1 << 24)
        return zt_fail(err, "%s: inconsistent world_size %lld", path, v[3]);
    m->tensor_parallel = 1;
    m->tp_shard[0] = m->shard;
    if (ver >= ZT_CKPT_VERSION_TP) { /* tensor parallelism: its size and each tp rank's shard */
        long long tp = 0;
        if ((rc = ck_get_i64(f, "tensor_parallel", &tp))) return attr_fail(err, path, "attribute tensor_parallel", rc);
        if (tp < 1 || tp > ZT_MAX_TP || v[3] % tp)
            return zt_fail(err, "%s: inconsistent tensor_parallel %lld for world_size %lld", path, tp, v[3]);
        m->tensor_parallel = (int)tp;
        if ((rc = ck_get_u64s(f, "tp_shard", m->tp_shard, (size_t)tp))) return attr_fail(err, path, "attribute tp_shard", rc);
    }
    if (read_state(r, err)) return -1;
    if (ver >= 2) { /* run id, shard digests and the metadata checksum */
        char *id = NULL;
        if ((rc = ck_get_str(f, "run_id", &id))) return attr_fail(err, path, "attribute run_id", rc);
        snprintf(m->run_id, sizeof m->run_id, "%s", id);
        free(id);
        r->shard_crc = zt_xcalloc((size_t)m->world_size, sizeof *r->shard_crc);
        if ((rc = ck_get_u32s(f, "shard_crc32c", r->shard_crc, (size_t)m->world_size)))
            return attr_fail(err, path, "attribute shard_crc32c", rc);
        unsigned long long want = 0;
        if ((rc = ck_get_u64(f, "metadata_crc32c", &want))) return attr_fail(err, path, "attribute metadata_crc32c", rc);
        if (want != ck_meta_digest(m, &r->state, r->shard_crc))
            return zt_fail(err, "%s: metadata checksum mismatch: the step, trainer state, model or config attributes were "
                                "changed after the save", path);
    } else if (!r->allow_unverified) {
        return zt_fail(err, "%s: checkpoint format version 1: its trainer state and the ties between its shards and "
                            "index are not checksummed, so an edit or a mixed-up shard would load unnoticed; load it "
                            "only with --set checkpoint.allow_unverified=true (then save to get version %d)",
                       path, ZT_CKPT_VERSION);
    } else {
        zt_warn("checkpoint: %s is format version 1: its trainer state and the ties between its shards and index are "
                "not checksummed (re-save to get version %d)", path, ZT_CKPT_VERSION);
    }
    read_lineage(r);
    zt_err terr;
    if (zt_gpt2_param_table(&r->table, &s, &terr) ||
        ck_partition_make(&r->part, &s, m->world_size, m->tensor_parallel, m->tp_shard, &terr))
        return zt_fail(err, "%s: %s", path, terr.msg);
    if (r->table.total != m->total)
        return zt_fail(err, "%s: total %zu does not match the saved model shape (%zu parameters)", path, m->total, r->table.total);
    for (int t = 0; t < r->part.tp; t++) /* every tp rank's local vector is covered by its shards */
        if (r->part.shard[t] == 0 || r->part.shard[t] * (size_t)r->part.dp < r->part.tables[t].total)
            return zt_fail(err, "%s: inconsistent world_size %d, shard %zu, total %zu (tensor-parallel rank %d of %d)", path,
                           m->world_size, r->part.shard[t], r->part.tables[t].total, t, r->part.tp);
    return check_saved_table(r, err);
}

/* Before HDF5 parses a byte of the index: the manifest's record of it (and of the rank files, kept for
 * src_load). A step saved before manifests is read with the older checks only, with a warning. */
static int verify_index_bytes(zt_checkpoint_reader *r, zt_err *err) {
    ck_file_record index;
    int has = ck_manifest_read(r->dir, &index, &r->files, &r->n_files, err);
    if (has < 0) return -1;
    if (!ck_is_file(r->index_path)) return zt_fail(err, "%s: missing (not a checkpoint step directory)", r->index_path);
    if (has == 0) {
        if (zt_log_rank() == 0) /* one line for the job, not one a rank */
            zt_warn("checkpoint: %s has no %s (saved by an older zerotrain): its files are not verified before HDF5 "
                    "reads them, so a damaged one may fail late or stall (re-save to get one)", r->dir, CK_MANIFEST);
        return 0;
    }
    return ck_file_verify(r->index_path, &index, err);
}

zt_checkpoint_reader *ck_reader_open(const char *step_dir, const zt_backend *stage_be, int allow_unverified,
                                     zt_err *err) {
    zt_checkpoint_reader *r = zt_xcalloc(1, sizeof *r);
    r->index = -1;
    for (int t = 0; t < ZT_MAX_TP; t++) r->vds[t][0] = r->vds[t][1] = r->vds[t][2] = -1;
    r->stage_be = stage_be;
    r->allow_unverified = allow_unverified;
    char why[CK_WHYCAP];
    if ((size_t)snprintf(r->dir, sizeof r->dir, "%s", step_dir) >= sizeof r->dir) {
        zt_fail(err, "%s: path too long", step_dir);
        goto fail;
    }
    if (ck_path_join(r->index_path, sizeof r->index_path, step_dir, "index.h5", err)) goto fail;
    if (verify_index_bytes(r, err)) goto fail;
    r->index = ck_open_h5(r->index_path, err, "%s: missing (not a checkpoint step directory)");
    if (r->index < 0 || read_meta(r, err)) goto fail;
    if (r->files && r->n_files != r->meta.world_size) {
        zt_fail(err, "%s/%s: records %d rank files, the index %d", step_dir, CK_MANIFEST, r->n_files, r->meta.world_size);
        goto fail;
    }
    r->src = zt_xcalloc((size_t)r->meta.world_size, sizeof *r->src);
    for (int s = 0; s < r->meta.world_size; s++) {
        char p[CK_PATHCAP];
        rank_path(r, s, p, sizeof p);
        if (!ck_is_file(p)) { zt_fail(err, "missing shard %s", p); goto fail; }
    }
    /* source files resolve against the step directory, wherever the process runs */
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    char prefix[CK_PATHCAP + 1];
    snprintf(prefix, sizeof prefix, "%s/", step_dir);
    H5Pset_virtual_prefix(dapl, prefix);
    /* each tp rank's local vectors: tp 1, the whole ones; else tp_local/T/NAME */
    for (int t = 0; t < r->part.tp; t++)
        for (int v = 0; v < 3; v++) {
            char name[64];
            if (r->part.tp == 1) snprintf(name, sizeof name, "%s", ck_vec_names[v]);
            else snprintf(name, sizeof name, "tp_local/%d/%s", t, ck_vec_names[v]);
            r->vds[t][v] = H5Dopen2(r->index, name, dapl);
            hsize_t dim = 0;
            hid_t sp = r->vds[t][v] >= 0 ? H5Dget_space(r->vds[t][v]) : -1;
            if (sp >= 0) { H5Sget_simple_extent_dims(sp, &dim, NULL); H5Sclose(sp); }
            if (r->vds[t][v] < 0 || dim != r->part.tables[t].total) {
                H5Pclose(dapl);
                zt_fail(err, "%s: dataset %s is missing or not of %zu elements (%s)", r->index_path, name,
                        r->part.tables[t].total, ck_h5_why(why));
                goto fail;
            }
        }
    H5Pclose(dapl);
    return r;
fail:
    zt_checkpoint_close(r);
    return NULL;
}

zt_checkpoint_reader *zt_checkpoint_open(const char *step_dir, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    zt_checkpoint_reader *r = ck_reader_open(step_dir, NULL, 1, err); /* info, export: read, with the warning */
    ck_h5_restore(q);
    return r;
}

/* opens rank file s once: validates its lo/hi/step, run id and dataset sizes, reads the chunk
 * CRCs and checks them against the index's digest of the shard */
static int src_load(zt_checkpoint_reader *r, int s, zt_err *err) {
    ck_src_info *si = &r->src[s];
    if (si->loaded) return 0;
    char p[CK_PATHCAP], why[CK_WHYCAP];
    rank_path(r, s, p, sizeof p);
    ck_partition_range(&r->part, s, &si->lo, &si->hi);
    if (!ck_is_file(p)) return zt_fail(err, "missing shard %s", p);
    if (r->files && ck_file_verify(p, &r->files[s], err)) return -1; /* before HDF5 parses it */
    hid_t f = ck_open_h5(p, err, "missing shard %s");
    if (f < 0) return -1;
    long long lo = -1, hi = -1, step = -1, tp_rank = 0, tp_size = 1;
    char *run_id = NULL;
    int rc = 0, a;
    if ((a = ck_get_i64(f, "lo", &lo)) || (a = ck_get_i64(f, "hi", &hi)) || (a = ck_get_i64(f, "step", &step)))
        rc = a == -2 ? attr_fail(err, p, "attribute lo/hi/step", a) : zt_fail(err, "%s: not a zerotrain shard (no lo/hi/step attributes)", p);
    else if ((size_t)lo != si->lo || (size_t)hi != si->hi || step != r->meta.step)
        rc = zt_fail(err, "%s: holds elements [%lld, %lld) of step %lld, the index expects [%zu, %zu) of step %ld", p, lo, hi,
                     step, si->lo, si->hi, r->meta.step);
    else if (r->meta.format_version >= 2 && (a = ck_get_str(f, "run_id", &run_id)))
        rc = attr_fail(err, p, "attribute run_id", a);
    else if (r->meta.format_version >= 2 && strcmp(run_id, r->meta.run_id)) {
        char shown[64];
        rc = zt_fail(err, "%s: belongs to another save (run id %s, the index's is %s): this step directory mixes two runs' "
                          "files", p, zt_escape_str(run_id, shown, sizeof shown), r->meta.run_id);
    } else if (r->part.tp > 1 && ((a = ck_get_i64(f, "tp_rank", &tp_rank)) || (a = ck_get_i64(f, "tp_size", &tp_size))))
        rc = attr_fail(err, p, "attribute tp_rank/tp_size", a);
    else if (tp_rank != s % r->part.tp || tp_size != r->part.tp)
        rc = zt_fail(err, "%s: holds tensor-parallel rank %lld of %lld, the index expects rank %d of %d", p, tp_rank, tp_size,
                     s % r->part.tp, r->part.tp);
    size_t n = si->hi - si->lo, nch[3] = {0, 0, 0};
    for (int v = 0; v < 3 && !rc; v++) {
        hid_t d = H5Dopen2(f, ck_vec_names[v], H5P_DEFAULT);
        if (d < 0) { rc = zt_fail(err, "%s: no dataset %s (%s)", p, ck_vec_names[v], ck_h5_why(why)); break; }
        hid_t sp = H5Dget_space(d);
        hsize_t dim = 0;
        H5Sget_simple_extent_dims(sp, &dim, NULL);
        H5Sclose(sp);
        long long C = 0;
        if (dim != n) rc = zt_fail(err, "%s: dataset %s has %llu elements, expected %zu", p, ck_vec_names[v], (unsigned long long)dim, n);
        else if (ck_get_i64(d, "checksum_chunk", &C) || C <= 0)
            rc = zt_fail(err, "%s: dataset %s has no checksum_chunk attribute", p, ck_vec_names[v]);
        if (!rc) {
            si->chunk[v] = (size_t)C;
            nch[v] = (n + si->chunk[v] - 1) / si->chunk[v];
            si->crc[v] = zt_xcalloc(ck_max(nch[v], 1), sizeof(uint32_t));
            if (ck_get_u32s(d, "crc32c", si->crc[v], ck_max(nch[v], 1)))
                rc = zt_fail(err, "%s: dataset %s has no valid crc32c attribute (%zu values expected)", p, ck_vec_names[v],
                             ck_max(nch[v], 1));
        }
        H5Dclose(d);
    }
    if (!rc && r->meta.format_version >= 2 &&
        ck_shard_digest(si->lo, si->hi, r->meta.step, r->meta.run_id, si->chunk, si->crc, nch) != r->shard_crc[s])
        rc = zt_fail(err, "%s: its checksums do not match the index's record of this shard (a rank file of another save?)", p);
    free(run_id);
    H5Fclose(f);
    si->loaded = !rc;
    return rc;
}

/* reads virtual elements [off, off + n) of tp rank t's vector v into host memory */
static int read_vds(zt_checkpoint_reader *r, int t, int v, size_t off, size_t n, float *out, zt_err *err) {
    if (!n) return 0;
    hsize_t start = off, count = n;
    hid_t fs = H5Dget_space(r->vds[t][v]), ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    herr_t rc = H5Dread(r->vds[t][v], H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    char why[CK_WHYCAP];
    if (rc < 0) return zt_fail(err, "%s: cannot read %s[%zu:%zu]: %s", r->index_path, ck_vec_names[v], off, off + n, ck_h5_why(why));
    return 0;
}

/* checks chunks [c, c + k) of shard s (data holds them, from the chunk c's first element) */
static int verify(zt_checkpoint_reader *r, int s, int v, size_t c, const float *data, size_t n, zt_err *err) {
    const ck_src_info *si = &r->src[s];
    size_t C = si->chunk[v], k = (n + C - 1) / C;
    uint32_t *got = zt_xcalloc(ck_max(k, 1), sizeof *got);
    ck_crc_chunks(data, n, C, got);
    int rc = 0;
    for (size_t i = 0; i < k; i++) {
        if (got[i] == si->crc[v][c + i]) continue;
        char p[CK_PATHCAP];
        rank_path(r, s, p, sizeof p);
        size_t a = (c + i) * C, b = ck_min(a + C, si->hi - si->lo);
        rc = zt_fail(err, "%s: checksum mismatch in dataset %s (elements %zu..%zu of the shard)", p, ck_vec_names[v], a, b);
        break;
    }
    free(got);
    /* the same pass over data still in cache: a save refuses non-finite state, so one here was
     * checksummed that way by a broken or foreign writer (a NaN never loads silently) */
    size_t bad = rc ? n : zt_first_nonfinite(data, n);
    if (bad < n) {
        char p[CK_PATHCAP], where[160];
        rank_path(r, s, p, sizeof p);
        size_t flat = si->lo + c * C + bad;
        ck_name_element(&r->part.tables[s % r->part.tp], v, flat, where, sizeof where);
        rc = zt_fail(err, "%s: element %zu of the shard, %s, is %g: a checkpoint holds finite state only", p,
                     flat - si->lo, where, data[bad]);
    }
    return rc;
}

static int ensure_stage(zt_checkpoint_reader *r, size_t need, zt_err *err) {
    if (r->stage_cap >= need) return 0;
    if (r->stage) { if (r->stage_be) r->stage_be->host_free(r->stage); else free(r->stage); }
    r->stage = r->stage_be ? r->stage_be->host_alloc(need * sizeof(float)) : malloc(need * sizeof(float));
    r->stage_cap = r->stage ? need : 0;
    if (!r->stage) return zt_fail(err, "out of host memory for a %zu MiB read buffer", need * sizeof(float) >> 20);
    return 0;
}

int ck_deliver(const ck_target *t, size_t a, size_t off, const float *host, size_t n) {
    if (t->direct) { memcpy(t->direct + (off - a), host, n * sizeof(float)); return 0; }
    return t->sink(t->ctx, off, host, n);
}

int ck_read_range(zt_checkpoint_reader *r, int tp_rank, int v, size_t a, size_t b, const ck_target *t, zt_err *err) {
    const ck_partition *pt = &r->part;
    if (b > pt->tables[tp_rank].total || a > b)
        return zt_fail(err, "%s: elements [%zu, %zu) are outside %s (%zu elements)", r->index_path, a, b, ck_vec_names[v],
                       pt->tables[tp_rank].total);
    for (int d = (int)(a / pt->shard[tp_rank]); a < b && d < pt->dp; d++) {
        int s = d * pt->tp + tp_rank;
        if (src_load(r, s, err)) return -1;
        const ck_src_info *si = &r->src[s];
        size_t x = ck_max(a, si->lo), y = ck_min(b, si->hi);
        if (x >= y) continue;
        size_t C = si->chunk[v], c = (x - si->lo) / C, cend = (y - si->lo + C - 1) / C;
        if (ensure_stage(r, ck_max(C, CK_STAGE_ELEMS / C * C), err)) return -1;
        size_t group = r->stage_cap / C;
        while (c < cend) {
            size_t clo = si->lo + c * C, chi = ck_min(clo + C, si->hi);
            if (t->direct && clo >= x && chi <= y) { /* run of whole chunks: in place */
                size_t c2 = c + 1;
                while (c2 < cend && ck_min(si->lo + (c2 + 1) * C, si->hi) <= y) c2++;
                size_t rhi = ck_min(si->lo + c2 * C, si->hi);
                float *dst = t->direct + (clo - a);
                if (read_vds(r, tp_rank, v, clo, rhi - clo, dst, err) || verify(r, s, v, c, dst, rhi - clo, err)) return -1;
                c = c2;
                continue;
            }
            size_t c2 = t->direct ? c + 1 : ck_min(cend, c + group);
            size_t ghi = ck_min(si->lo + c2 * C, si->hi);
            if (read_vds(r, tp_rank, v, clo, ghi - clo, r->stage, err) || verify(r, s, v, c, r->stage, ghi - clo, err))
                return -1;
            size_t ua = ck_max(clo, x), ub = ck_min(ghi, y);
            if (ck_deliver(t, a, ua, r->stage + (ua - clo), ub - ua)) return zt_fail(err, "%s: cannot deliver data", r->index_path);
            c = c2;
        }
    }
    return 0;
}

/* whole rows [q0, q1) of whole tensor i of vector v into r->rows, from every tp rank holding a part */
static int assemble_rows(zt_checkpoint_reader *r, int v, int i, size_t q0, size_t q1, zt_err *err) {
    size_t cols = (size_t)zt_param_cols(&r->table.params[i]);
    for (int t = 0; t < r->part.tp; t++) {
        const zt_param_info *p = &r->part.tables[t].params[i];
        if (p->split == ZT_TP_WHOLE && t > 0) break; /* every tp rank's copy is the same (checked at save) */
        size_t l0 = q0, l1 = q1, pc = (size_t)zt_param_cols(p); /* its local rows of [q0, q1) */
        if (p->split == ZT_TP_ROWS) {
            size_t lo = (size_t)p->split_lo, hi = lo + (size_t)zt_tp_rows_in_whole(p);
            l0 = ck_max(q0, lo) - lo;
            l1 = ck_max(ck_min(q1, hi), lo) - lo;
        }
        if (l0 >= l1) continue;
        ck_target into = {r->part_rows, NULL, NULL};
        if (ck_read_range(r, t, v, p->offset + l0 * pc, p->offset + l1 * pc, &into, err)) return -1;
        for (size_t l = l0; l < l1; l++)
            zt_tp_put_row(p, r->part_rows + (l - l0) * pc, r->rows + ((size_t)zt_tp_whole_row(p, (int)l) - q0) * cols);
    }
    return 0;
}

int ck_read_whole(zt_checkpoint_reader *r, int v, size_t a, size_t b, float *out, zt_err *err) {
    if (r->part.tp == 1) {
        ck_target t = {out, NULL, NULL};
        return ck_read_range(r, 0, v, a, b, &t, err);
    }
    if (b > r->meta.total || a > b)
        return zt_fail(err, "%s: elements [%zu, %zu) are outside %s (%zu elements)", r->index_path, a, b, ck_vec_names[v],
                       r->meta.total);
    if (!r->rows) { /* a whole row is at most 4 n_embd elements: CK_ROWS_ELEMS holds one (and then some) */
        r->rows = zt_xmalloc(CK_ROWS_ELEMS * sizeof *r->rows);
        r->part_rows = zt_xmalloc(CK_ROWS_ELEMS * sizeof *r->part_rows);
    }
    for (int i = 0; i < r->table.count; i++) {
        const zt_param_info *w = &r->table.params[i];
        size_t cols = (size_t)zt_param_cols(w), x = ck_max(a, w->offset), y = ck_min(b, w->offset + w->numel);
        if (x >= y) continue;
        if (cols > CK_ROWS_ELEMS) return zt_fail(err, "%s: tensor %s has rows longer than %zu elements", r->index_path, w->name, CK_ROWS_ELEMS);
        size_t per = CK_ROWS_ELEMS / cols, q1;
        for (size_t q0 = (x - w->offset) / cols; w->offset + q0 * cols < y; q0 = q1) {
            q1 = ck_min(q0 + per, (size_t)zt_param_rows(w));
            if (assemble_rows(r, v, i, q0, q1, err)) return -1;
            size_t lo = ck_max(x, w->offset + q0 * cols), hi = ck_min(y, w->offset + q1 * cols);
            memcpy(out + (lo - a), r->rows + (lo - w->offset - q0 * cols), (hi - lo) * sizeof *out);
        }
    }
    return 0;
}

int zt_checkpoint_read(zt_checkpoint_reader *r, zt_ckpt_vector v, size_t offset, size_t n, float *out, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    int rc = ck_read_whole(r, (int)v, offset, offset + n, out, err);
    ck_h5_restore(q);
    return rc;
}

static int discard(void *ctx, size_t off, const float *host, size_t n) { (void)ctx; (void)off; (void)host; (void)n; return 0; }

int zt_checkpoint_verify(zt_checkpoint_reader *r, zt_err *err) {
    ck_h5_quiet q = ck_h5_silence();
    int rc = 0;
    for (int s = 0; s < r->meta.world_size && !rc; s++) rc = src_load(r, s, err);
    ck_target t = {NULL, discard, NULL};
    for (int v = 0; v < 3 && !rc; v++)
        for (int tp = 0; tp < r->part.tp && !rc; tp++) rc = ck_read_range(r, tp, v, 0, r->part.tables[tp].total, &t, err);
    ck_h5_restore(q);
    return rc;
}
