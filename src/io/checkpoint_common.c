/* checkpoint_common.c — the pieces every checkpoint module shares (see checkpoint_common.h):
 * CRC32C, the save digests, HDF5 helpers, the files and directories of a checkpoint and the partition
 * of the saved vectors (which rank file holds which elements of which tensor-parallel rank's vector).
 *
 * Integrity: each rank file dataset is cut into chunks of checksum_chunk elements (1 Mi, doubled
 * until there are at most CK_MAX_CHUNKS) and stores one CRC32C per chunk, computed per chunk in
 * parallel (OpenMP) with util/crc32c.h (the SSE4.2 crc32 instruction where the CPU has it). */
#define _GNU_SOURCE
#include "io/checkpoint_common.h"

#include "io/hf_config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/crc32c.h"

const char *const ck_vec_names[3] = {"master", "adam_m", "adam_v"};

/* ================================================================ chunk checksums */

void ck_crc_chunks(const float *data, size_t n, size_t C, uint32_t *crc) {
    long nch = (long)((n + C - 1) / C);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nch; k++) {
        size_t a = (size_t)k * C, m = n - a < C ? n - a : C;
        crc[k] = zt_crc32c(0, data + a, m * sizeof(float));
    }
}

size_t ck_chunk_elems(size_t n) {
    size_t c = (size_t)1 << 20;
    while ((n + c - 1) / c > CK_MAX_CHUNKS) c *= 2;
    return c;
}

void ck_name_element(const zt_param_table *t, int which, size_t flat, char *buf, size_t cap) {
    for (int i = 0; i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        if (flat >= p->offset && flat < p->offset + p->numel) {
            snprintf(buf, cap, "%s of %s (element %zu)", ck_vec_names[which], p->name, flat - p->offset);
            return;
        }
    }
    snprintf(buf, cap, "%s element %zu", ck_vec_names[which], flat);
}

uint32_t ck_shard_digest(size_t lo, size_t hi, long step, const char *run_id, const size_t chunk[3],
                         uint32_t *const crc[3], const size_t nch[3]) {
    char head[160];
    int len = snprintf(head, sizeof head, "lo=%zu hi=%zu step=%ld run_id=%s chunk=%zu,%zu,%zu", lo, hi, step, run_id,
                       chunk[0], chunk[1], chunk[2]);
    uint32_t d = zt_crc32c(0, head, (size_t)len);
    for (int v = 0; v < 3; v++)
        for (size_t i = 0; i < nch[v]; i++) { /* little-endian bytes whatever the host */
            unsigned char b[4] = {(unsigned char)crc[v][i], (unsigned char)(crc[v][i] >> 8),
                                  (unsigned char)(crc[v][i] >> 16), (unsigned char)(crc[v][i] >> 24)};
            d = zt_crc32c(d, b, 4);
        }
    return d;
}

int ck_put_model(hid_t f, const zt_gpt2_shape *shape) {
    if (ck_put_str(f, "model", zt_model_type_name(shape->model_type))) return -1;
    if (!zt_shape_is_llama(shape)) return 0;
    zt_sb text = {0};
    zt_hf_config_text(shape, "float32", 0, &text);
    int rc = ck_put_str(f, "model_config", text.p);
    free(text.p);
    return rc;
}

int ck_get_model(hid_t f, const char *path, zt_gpt2_shape *shape, zt_err *err) {
    char *family = NULL, *text = NULL;
    int rc = ck_get_str(f, "model", &family);
    if (rc == -2) return zt_fail(err, "%s: damaged: cannot read attribute model", path);
    if (rc || !strcmp(family, "gpt2")) { /* absent: saved before the Llama family, a GPT-2 */
        free(family);
        return 0;
    }
    zt_gpt2_shape numbers = *shape;
    char name[CK_PATHCAP + 32];
    snprintf(name, sizeof name, "%s: attribute model_config", path);
    if (ck_get_str(f, "model_config", &text))
        rc = zt_fail(err, "%s: a %s checkpoint without its model_config attribute", path, family);
    else if (zt_hf_config_parse_text(text, strlen(text), name, shape, err))
        rc = -1;
    else if (strcmp(zt_model_type_name(shape->model_type), family) ||
             shape->n_layer != numbers.n_layer || shape->n_head != numbers.n_head || shape->n_embd != numbers.n_embd ||
             shape->vocab_size != numbers.vocab_size || shape->n_positions != numbers.n_positions)
        rc = zt_fail(err, "%s: attribute model_config describes another model than the attributes model (%s) and n_layer "
                          "... n_positions", path, family);
    free(family);
    free(text);
    return rc;
}

uint32_t ck_meta_digest(const zt_checkpoint_meta *m, const zt_train_state *st, const uint32_t *shard_crc) {
    char text[1024];
    const zt_gpt2_shape *s = &m->shape;
    int len = snprintf(text, sizeof text,
                       "format_version=%d step=%ld tokens_seen=%ld adam_t=%ld world_size=%d zero_stage=%d total=%zu "
                       "shard=%zu n_layer=%d n_head=%d n_embd=%d vocab_size=%d n_positions=%d run_id=%s "
                       "state: step=%ld tokens_seen=%ld data_samples=%ld rng_state=%llu loss_scale=%a "
                       "loss_scale_good_steps=%d hysteresis_left=%d config=",
                       m->format_version, m->step, m->tokens_seen, m->adam_t, m->world_size, m->zero_stage, m->total,
                       m->shard, s->n_layer, s->n_head, s->n_embd, s->vocab_size, s->n_positions, m->run_id, st->step,
                       st->tokens_seen, st->data_samples, st->rng_state, st->loss_scale, st->loss_scale_good_steps,
                       st->hysteresis_left);
    uint32_t d = zt_crc32c(0, text, (size_t)len < sizeof text ? (size_t)len : sizeof text - 1);
    const char *cfg = m->config_text ? m->config_text : "";
    d = zt_crc32c(d, cfg, strlen(cfg));
    if (zt_shape_is_llama(s)) { /* the family's shape, exactly (%a), whatever text holds it (GPT-2's digest is unchanged) */
        len = snprintf(text, sizeof text,
                       " model_type=%d n_kv_head=%d intermediate=%d untied=%d bias=%d,%d,%d rope_theta=%a rms_norm_eps=%a "
                       "rope_scaling=%a,%a,%a,%d sliding_window=%d",
                       (int)s->model_type, zt_shape_kv_heads(s), s->intermediate, s->untied, s->qkv_bias, s->o_bias,
                       s->mlp_bias, (double)s->rope_theta, (double)s->rms_norm_eps, (double)s->rope_factor,
                       (double)s->rope_low_freq_factor, (double)s->rope_high_freq_factor, s->rope_original_max,
                       s->sliding_window);
        d = zt_crc32c(d, text, (size_t)len);
    }
    for (int r = 0; r < m->world_size; r++) {
        unsigned char b[4] = {(unsigned char)shard_crc[r], (unsigned char)(shard_crc[r] >> 8),
                              (unsigned char)(shard_crc[r] >> 16), (unsigned char)(shard_crc[r] >> 24)};
        d = zt_crc32c(d, b, 4);
    }
    if (m->format_version >= ZT_CKPT_VERSION_TP) { /* tensor parallelism: its size and each tp rank's shard */
        len = snprintf(text, sizeof text, " tensor_parallel=%d tp_shard=", m->tensor_parallel);
        d = zt_crc32c(d, text, (size_t)len);
        for (int t = 0; t < m->tensor_parallel && t < ZT_MAX_TP; t++) {
            len = snprintf(text, sizeof text, "%zu,", m->tp_shard[t]);
            d = zt_crc32c(d, text, (size_t)len);
        }
    }
    return d;
}

/* ================================================================ HDF5 helpers */

/* HDF5 prints its error stack by default. Inside the checkpoint's public calls a recorder takes
 * its place: HDF5 calls it when an API call fails, with that call's error stack, and it keeps the
 * reason. Reading the stack later would be too late: every API call (a cleanup H5Sclose after the
 * failing H5Dwrite) clears it on entry. HDF5's error handling is per process, so is this record. */
static char h5_reason[CK_WHYCAP];

/* the innermost description, or the first one that carries the operating system's reason */
typedef struct { char inner[CK_WHYCAP]; char os[CK_WHYCAP]; } why_walk;
static herr_t why_entry(unsigned n, const H5E_error2_t *e, void *data) {
    why_walk *w = data;
    if (!e->desc) return 0;
    if (n == 0) snprintf(w->inner, sizeof w->inner, "%s", e->desc);
    const char *m = strstr(e->desc, "error message = '");
    if (m && !w->os[0]) {
        m += strlen("error message = '");
        snprintf(w->os, sizeof w->os, "%.*s", (int)strcspn(m, "'"), m);
    }
    return 0;
}
static herr_t record_reason(hid_t stack, void *data) {
    (void)data;
    why_walk w = {"", ""};
    H5Ewalk2(stack, H5E_WALK_UPWARD, why_entry, &w);
    /* HDF5's write errors embed ctime's text with its newline: one line, printable */
    const char *src = w.os[0] ? w.os : w.inner;
    if (src[0]) zt_escape_str(src, h5_reason, sizeof h5_reason);
    return 0;
}

ck_h5_quiet ck_h5_silence(void) {
    ck_h5_quiet q = {0, 0};
    H5open();
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, record_reason, NULL);
    h5_reason[0] = 0;
    return q;
}
void ck_h5_restore(ck_h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

const char *ck_h5_why(char buf[CK_WHYCAP]) {
    snprintf(buf, CK_WHYCAP, "%s", h5_reason[0] ? h5_reason : "HDF5 error");
    h5_reason[0] = 0;
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

void ck_h5_close(hid_t *id) {
    if (*id < 0) return;
    switch (H5Iget_type(*id)) {
    case H5I_FILE: H5Fclose(*id); break;
    case H5I_GROUP: H5Gclose(*id); break;
    case H5I_DATASET: H5Dclose(*id); break;
    case H5I_DATASPACE: H5Sclose(*id); break;
    case H5I_DATATYPE: H5Tclose(*id); break;
    case H5I_ATTR: H5Aclose(*id); break;
    case H5I_GENPROP_LST: H5Pclose(*id); break;
    default: break;
    }
    *id = -1;
}

hid_t ck_file_access(void) {
    hid_t p = H5Pcreate(H5P_FILE_ACCESS);
    /* file locks fail on some parallel file systems and buy nothing here: a step directory has one
     * writer per file, and readers only see it after the rename */
    H5Pset_file_locking(p, 0, 1);
    /* objects of 1 MiB and more start on 64 KiB boundaries: aligned large I/O */
    H5Pset_alignment(p, (hsize_t)1 << 20, (hsize_t)1 << 16);
    /* format of HDF5 1.10: needed for virtual datasets anyway, and allows large attributes */
    H5Pset_libver_bounds(p, H5F_LIBVER_V110, H5F_LIBVER_LATEST);
    return p;
}

static int put_attr(hid_t obj, const char *name, hid_t ftype, hid_t mtype, const void *val, hsize_t n) {
    hid_t sp = n == 0 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, NULL);
    hid_t a = H5Acreate2(obj, name, ftype, sp, H5P_DEFAULT, H5P_DEFAULT);
    int rc = a >= 0 && H5Awrite(a, mtype, val) >= 0 ? 0 : -1;
    if (a >= 0) H5Aclose(a);
    H5Sclose(sp);
    return rc;
}
int ck_put_i64(hid_t obj, const char *name, long long v) { return put_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &v, 0); }
int ck_put_u64(hid_t obj, const char *name, unsigned long long v) {
    return put_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_ULLONG, &v, 0);
}
int ck_put_f64(hid_t obj, const char *name, double v) { return put_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 0); }
int ck_put_str(hid_t obj, const char *name, const char *s) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(s) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = put_attr(obj, name, t, t, s, 0);
    H5Tclose(t);
    return rc;
}
int ck_put_u32s(hid_t obj, const char *name, const uint32_t *v, size_t n) {
    return put_attr(obj, name, H5T_STD_U32LE, H5T_NATIVE_UINT32, v, (hsize_t)ck_max(n, 1));
}
int ck_put_u64s(hid_t obj, const char *name, const size_t *v, size_t n) {
    unsigned long long *u = zt_xcalloc(ck_max(n, 1), sizeof *u);
    for (size_t i = 0; i < n; i++) u[i] = v[i];
    int rc = put_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_ULLONG, u, (hsize_t)ck_max(n, 1));
    free(u);
    return rc;
}

/* opens attribute NAME: >= 0, -1 when missing, -2 when HDF5 cannot tell (damaged) */
static hid_t open_attr(hid_t obj, const char *name) {
    htri_t ex = H5Aexists(obj, name);
    if (ex == 0) return -1;
    hid_t a = ex > 0 ? H5Aopen(obj, name, H5P_DEFAULT) : -1;
    return a >= 0 ? a : -2;
}

/* a scalar numeric attribute read as mtype */
static int get_scalar(hid_t obj, const char *name, hid_t mtype, void *v) {
    hid_t a = open_attr(obj, name);
    if (a < 0) return (int)a;
    hid_t t = H5Aget_type(a), sp = H5Aget_space(a);
    int rc = -2;
    if (t >= 0 && sp >= 0) {
        H5T_class_t c = H5Tget_class(t);
        rc = (c == H5T_INTEGER || c == H5T_FLOAT) && H5Sget_simple_extent_npoints(sp) == 1 ? 0 : -1;
        if (!rc && H5Aread(a, mtype, v) < 0) rc = -2;
    }
    if (sp >= 0) H5Sclose(sp);
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}
int ck_get_i64(hid_t obj, const char *name, long long *v) { return get_scalar(obj, name, H5T_NATIVE_LLONG, v); }
int ck_get_u64(hid_t obj, const char *name, unsigned long long *v) { return get_scalar(obj, name, H5T_NATIVE_ULLONG, v); }
int ck_get_f64(hid_t obj, const char *name, double *v) { return get_scalar(obj, name, H5T_NATIVE_DOUBLE, v); }

int ck_get_str(hid_t obj, const char *name, char **out) {
    *out = NULL;
    hid_t a = open_attr(obj, name);
    if (a < 0) return (int)a;
    hid_t t = H5Aget_type(a);
    int rc = t < 0 ? -2 : H5Tget_class(t) == H5T_STRING ? 0 : -1;
    if (!rc && H5Tis_variable_str(t) > 0) {
        hid_t mt = H5Tcopy(H5T_C_S1);
        H5Tset_size(mt, H5T_VARIABLE);
        char *s = NULL;
        if (H5Aread(a, mt, &s) >= 0 && s) { *out = zt_xstrdup(s); H5free_memory(s); }
        else rc = -2;
        H5Tclose(mt);
    } else if (!rc) {
        size_t n = H5Tget_size(t);
        *out = zt_xcalloc(n + 1, 1);
        if (H5Aread(a, t, *out) < 0) { free(*out); *out = NULL; rc = -2; }
    }
    if (t >= 0) H5Tclose(t);
    H5Aclose(a);
    return rc;
}

/* a 1-D attribute of exactly n values read as mtype */
static int get_array(hid_t obj, const char *name, hid_t mtype, void *v, size_t n) {
    hid_t a = open_attr(obj, name);
    if (a < 0) return (int)a;
    hid_t sp = H5Aget_space(a);
    int rc = sp < 0 ? -2 : (size_t)H5Sget_simple_extent_npoints(sp) == n ? 0 : -1;
    if (!rc && H5Aread(a, mtype, v) < 0) rc = -2;
    if (sp >= 0) H5Sclose(sp);
    H5Aclose(a);
    return rc;
}
int ck_get_u32s(hid_t obj, const char *name, uint32_t *v, size_t n) { return get_array(obj, name, H5T_NATIVE_UINT32, v, n); }
int ck_get_u64s(hid_t obj, const char *name, size_t *v, size_t n) {
    unsigned long long *u = zt_xcalloc(ck_max(n, 1), sizeof *u);
    int rc = get_array(obj, name, H5T_NATIVE_ULLONG, u, n);
    for (size_t i = 0; !rc && i < n; i++) v[i] = (size_t)u[i];
    free(u);
    return rc;
}

hid_t ck_table_row_type(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(ck_table_row));
    hid_t s = H5Tcopy(H5T_C_S1);
    H5Tset_size(s, 64);
    hsize_t two = 2;
    hid_t arr = H5Tarray_create2(H5T_NATIVE_INT32, 1, &two);
    H5Tinsert(t, "name", HOFFSET(ck_table_row, name), s);
    H5Tinsert(t, "ndim", HOFFSET(ck_table_row, ndim), H5T_NATIVE_INT32);
    H5Tinsert(t, "shape", HOFFSET(ck_table_row, shape), arr);
    H5Tinsert(t, "offset", HOFFSET(ck_table_row, offset), H5T_NATIVE_UINT64);
    H5Tinsert(t, "numel", HOFFSET(ck_table_row, numel), H5T_NATIVE_UINT64);
    H5Tinsert(t, "segment", HOFFSET(ck_table_row, segment), H5T_NATIVE_INT32);
    H5Tinsert(t, "decay", HOFFSET(ck_table_row, decay), H5T_NATIVE_INT32);
    H5Tclose(s);
    H5Tclose(arr);
    return t;
}

/* ================================================================ files and directories */

int ck_path_join(char *out, size_t cap, const char *a, const char *b, zt_err *err) {
    if ((size_t)snprintf(out, cap, "%s/%s", a, b) >= cap) return zt_fail(err, "%s/%s: path too long", a, b);
    return 0;
}
int ck_is_dir(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISDIR(st.st_mode); }
int ck_is_file(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISREG(st.st_mode); }

int ck_fsync_path(const char *path, zt_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zt_fail(err, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc) return zt_fail(err, "%s: fsync failed: %s", path, strerror(e));
    return 0;
}

int ck_mkdir_p(const char *path, zt_err *err) {
    char buf[CK_PATHCAP];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf) return zt_fail(err, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return zt_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
        if (!c) break;
        *p = c;
    }
    if (!ck_is_dir(path)) return zt_fail(err, "%s: exists and is not a directory", path);
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}
int ck_rmtree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

long ck_step_of_name(const char *name) {
    if (strncmp(name, "step_", 5)) return -1;
    const char *d = name + 5;
    if (strlen(d) < 8 || strlen(d) > 18) return -1;
    for (const char *q = d; *q; q++)
        if (*q < '0' || *q > '9') return -1;
    return strtol(d, NULL, 10);
}

static int cmp_step(const void *a, const void *b) {
    long x = ((const ck_step_entry *)a)->step, y = ((const ck_step_entry *)b)->step;
    return x < y ? -1 : x > y;
}

int ck_list_steps(const char *dir, ck_step_entry **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long s = ck_step_of_name(de->d_name);
        char idx[CK_PATHCAP];
        if (s < 0 || strlen(de->d_name) >= sizeof(*out)->name) continue;
        if ((size_t)snprintf(idx, sizeof idx, "%s/%s/index.h5", dir, de->d_name) >= sizeof idx || !ck_is_file(idx)) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            ck_step_entry *grown = zt_xmalloc((size_t)cap * sizeof *grown);
            if (n) memcpy(grown, *out, (size_t)n * sizeof *grown);
            free(*out);
            *out = grown;
        }
        (*out)[n].step = s;
        snprintf((*out)[n].name, sizeof(*out)->name, "%s", de->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(*out, (size_t)n, sizeof **out, cmp_step);
    return n;
}

void ck_rank_range(size_t total, size_t shard, int r, size_t *lo, size_t *hi) {
    *lo = ck_min((size_t)r * shard, total);
    *hi = ck_min(*lo + shard, total);
}

void ck_rank_file_name(char *buf, size_t cap, int r) { snprintf(buf, cap, "rank_%05d.h5", r); }

/* ================================================================ the partition */

int ck_partition_make(ck_partition *p, const zt_gpt2_shape *shape, int world, int tp, const size_t *shard, zt_err *err) {
    memset(p, 0, sizeof *p);
    if (tp < 1 || tp > ZT_MAX_TP || world < tp || world % tp)
        return zt_fail(err, "tensor-parallel size %d does not divide %d ranks (at most %d)", tp, world, ZT_MAX_TP);
    p->tp = tp;
    p->dp = world / tp;
    p->tables = zt_xcalloc((size_t)tp, sizeof *p->tables);
    for (int t = 0; t < tp; t++) {
        p->shard[t] = shard[t];
        if (zt_gpt2_param_table_tp(&p->tables[t], shape, t, tp, err)) {
            ck_partition_free(p);
            return -1;
        }
    }
    return 0;
}

void ck_partition_free(ck_partition *p) {
    for (int t = 0; p->tables && t < p->tp; t++) zt_param_table_free(&p->tables[t]);
    free(p->tables);
    p->tables = NULL;
}

void ck_partition_range(const ck_partition *p, int file, size_t *lo, size_t *hi) {
    int t = file % p->tp;
    ck_rank_range(p->tables[t].total, p->shard[t], file / p->tp, lo, hi);
}
