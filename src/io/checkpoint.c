/* checkpoint.c — sharded HDF5 checkpoints (see checkpoint.h for the layout).
 *
 * Integrity: each rank file dataset is cut into chunks of checksum_chunk elements (1 Mi, doubled
 * until there are at most ZT_MAX_CHUNKS) and stores one CRC32C per chunk. A reader that needs
 * elements [a, b) reads the whole chunks covering them (at most one extra chunk at each end of each
 * shard it touches) and verifies exactly those: resharded loads and single-tensor exports never
 * read more than they use plus 2 chunks per shard, and every byte they use is verified.
 *
 * Bandwidth: data goes to HDF5 in large contiguous writes with no fill values (fill time never) and
 * no filters. On host-memory backends (cpu) the engine's buffers are written and read in place;
 * device backends stage through a pinned host buffer of ZT_STAGE_ELEMS elements. CRCs are computed
 * per chunk in parallel (OpenMP) with the SSE4.2 crc32 instruction where available. */
#define _GNU_SOURCE
#include "io/checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hdf5.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

#define ZT_MAX_CHUNKS 4096                 /* per dataset: keeps the crc32c attribute under 16 KiB */
#define ZT_STAGE_ELEMS ((size_t)16 << 20)  /* 64 MiB host staging for device backends and edges */
#define PATHCAP 4096

static const char *const vec_names[3] = {"master", "adam_m", "adam_v"};

/* ================================================================ CRC32C */

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI/ext4/btrfs): check value of
 * "123456789" is 0xE3069283. Hardware: SSE4.2 crc32 instruction, 8 bytes at a time. */
static uint32_t crc_table[256];
static void crc_init(void) {
    if (crc_table[1]) return;
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_table[i] = c;
    }
}

uint32_t zt_crc32c(uint32_t crc, const void *data, size_t n) {
    const unsigned char *p = data;
    uint32_t c = ~crc;
#if defined(__SSE4_2__)
    uint64_t c64 = c;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        c64 = _mm_crc32_u64(c64, w);
    }
    c = (uint32_t)c64;
    for (; n; n--) c = _mm_crc32_u8(c, *p++);
#else
    crc_init();
    for (; n; n--) c = crc_table[(c ^ *p++) & 0xff] ^ (c >> 8);
#endif
    return ~c;
}

/* crc[k] = CRC32C of chunk k (elements [k*C, min((k+1)*C, n))) of data */
static void crc_chunks(const float *data, size_t n, size_t C, uint32_t *crc) {
    crc_init();
    long nch = (long)((n + C - 1) / C);
#pragma omp parallel for schedule(static)
    for (long k = 0; k < nch; k++) {
        size_t a = (size_t)k * C, m = n - a < C ? n - a : C;
        crc[k] = zt_crc32c(0, data + a, m * sizeof(float));
    }
}

static size_t chunk_elems(size_t n) {
    size_t c = (size_t)1 << 20;
    while ((n + c - 1) / c > ZT_MAX_CHUNKS) c *= 2;
    return c;
}

static size_t min_sz(size_t a, size_t b) { return a < b ? a : b; }
static size_t max_sz(size_t a, size_t b) { return a > b ? a : b; }

/* ================================================================ HDF5 helpers */

/* HDF5 prints its error stack by default; we report errors ourselves (with the innermost HDF5
 * reason appended), so printing is off inside this module's public calls. */
typedef struct { H5E_auto2_t fn; void *data; } h5_quiet;
static h5_quiet h5_silence(void) {
    h5_quiet q = {0, 0};
    H5open();
    H5Eget_auto2(H5E_DEFAULT, &q.fn, &q.data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    return q;
}
static void h5_restore(h5_quiet q) { H5Eset_auto2(H5E_DEFAULT, q.fn, q.data); }

static herr_t innermost(unsigned n, const H5E_error2_t *e, void *data) {
    if (n == 0 && e->desc) snprintf(data, 256, "%s", e->desc);
    return 0;
}
/* the innermost HDF5 error description (e.g. "truncated file: eof = ..."), then clears the stack */
static const char *h5_why(char buf[256]) {
    snprintf(buf, 256, "HDF5 error");
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost, buf);
    H5Eclear2(H5E_DEFAULT);
    return buf;
}

static void h5_close(hid_t *id) {
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

static hid_t file_access(void) {
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
static int put_i64(hid_t obj, const char *name, long long v) {
    return put_attr(obj, name, H5T_STD_I64LE, H5T_NATIVE_LLONG, &v, 0);
}
static int put_u64(hid_t obj, const char *name, unsigned long long v) {
    return put_attr(obj, name, H5T_STD_U64LE, H5T_NATIVE_ULLONG, &v, 0);
}
static int put_f64(hid_t obj, const char *name, double v) {
    return put_attr(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &v, 0);
}
static int put_str(hid_t obj, const char *name, const char *s) {
    hid_t t = H5Tcopy(H5T_C_S1);
    H5Tset_size(t, strlen(s) + 1);
    H5Tset_strpad(t, H5T_STR_NULLTERM);
    int rc = put_attr(obj, name, t, t, s, 0);
    H5Tclose(t);
    return rc;
}

/* reads a scalar numeric attribute (converted to long long / double); -1 when missing or not numeric */
static int get_i64(hid_t obj, const char *name, long long *v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    hid_t sp = H5Aget_space(a);
    H5T_class_t c = H5Tget_class(t);
    int ok = (c == H5T_INTEGER || c == H5T_FLOAT) && H5Sget_simple_extent_npoints(sp) == 1 &&
             H5Aread(a, H5T_NATIVE_LLONG, v) >= 0;
    H5Sclose(sp);
    H5Tclose(t);
    H5Aclose(a);
    return ok ? 0 : -1;
}
static int get_f64(hid_t obj, const char *name, double *v) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    int ok = (H5Tget_class(t) == H5T_FLOAT || H5Tget_class(t) == H5T_INTEGER) && H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
    H5Tclose(t);
    H5Aclose(a);
    return ok ? 0 : -1;
}
/* a string attribute (fixed or variable length) as a malloc'ed string; NULL when missing or not a string */
static char *get_str(hid_t obj, const char *name) {
    if (H5Aexists(obj, name) <= 0) return NULL;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t t = H5Aget_type(a);
    char *out = NULL;
    if (H5Tget_class(t) == H5T_STRING) {
        if (H5Tis_variable_str(t) > 0) {
            hid_t mt = H5Tcopy(H5T_C_S1);
            H5Tset_size(mt, H5T_VARIABLE);
            char *s = NULL;
            if (H5Aread(a, mt, &s) >= 0 && s) { out = zt_xstrdup(s); H5free_memory(s); }
            H5Tclose(mt);
        } else {
            size_t n = H5Tget_size(t);
            out = zt_xcalloc(n + 1, 1);
            if (H5Aread(a, t, out) < 0) { free(out); out = NULL; }
        }
    }
    H5Tclose(t);
    H5Aclose(a);
    return out;
}
/* a 1-D uint32 attribute of exactly n values */
static int get_u32s(hid_t obj, const char *name, uint32_t *v, size_t n) {
    if (H5Aexists(obj, name) <= 0) return -1;
    hid_t a = H5Aopen(obj, name, H5P_DEFAULT);
    hid_t sp = H5Aget_space(a);
    int ok = (size_t)H5Sget_simple_extent_npoints(sp) == n && H5Aread(a, H5T_NATIVE_UINT32, v) >= 0;
    H5Sclose(sp);
    H5Aclose(a);
    return ok ? 0 : -1;
}

/* the compound row of dataset param_table */
typedef struct table_row {
    char name[64];
    int32_t ndim, shape[2];
    uint64_t offset, numel;
    int32_t segment, decay;
} table_row;

static hid_t table_row_type(void) {
    hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(table_row));
    hid_t s = H5Tcopy(H5T_C_S1);
    H5Tset_size(s, 64);
    hsize_t two = 2;
    hid_t arr = H5Tarray_create2(H5T_NATIVE_INT32, 1, &two);
    H5Tinsert(t, "name", HOFFSET(table_row, name), s);
    H5Tinsert(t, "ndim", HOFFSET(table_row, ndim), H5T_NATIVE_INT32);
    H5Tinsert(t, "shape", HOFFSET(table_row, shape), arr);
    H5Tinsert(t, "offset", HOFFSET(table_row, offset), H5T_NATIVE_UINT64);
    H5Tinsert(t, "numel", HOFFSET(table_row, numel), H5T_NATIVE_UINT64);
    H5Tinsert(t, "segment", HOFFSET(table_row, segment), H5T_NATIVE_INT32);
    H5Tinsert(t, "decay", HOFFSET(table_row, decay), H5T_NATIVE_INT32);
    H5Tclose(s);
    H5Tclose(arr);
    return t;
}

/* ================================================================ files and directories */

static int path_join(char *out, size_t cap, const char *a, const char *b, zt_err *err) {
    if ((size_t)snprintf(out, cap, "%s/%s", a, b) >= cap) return zt_fail(err, "%s/%s: path too long", a, b);
    return 0;
}
static int is_dir(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISDIR(st.st_mode); }
static int is_file(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISREG(st.st_mode); }

static int fsync_path(const char *path, zt_err *err) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return zt_fail(err, "%s: cannot open to sync: %s", path, strerror(errno));
    int rc = fsync(fd);
    int e = errno;
    close(fd);
    if (rc) return zt_fail(err, "%s: fsync failed: %s", path, strerror(e));
    return 0;
}

static int mkdir_p(const char *path, zt_err *err) {
    char buf[PATHCAP];
    if ((size_t)snprintf(buf, sizeof buf, "%s", path) >= sizeof buf) return zt_fail(err, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p != '/' && *p) continue;
        char c = *p;
        *p = 0;
        if (mkdir(buf, 0777) && errno != EEXIST) return zt_fail(err, "%s: cannot create directory: %s", buf, strerror(errno));
        if (!c) break;
        *p = c;
    }
    if (!is_dir(path)) return zt_fail(err, "%s: exists and is not a directory", path);
    return 0;
}

static int rm_entry(const char *p, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(p);
}
static int rmtree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* step_%08ld exactly → step; else -1 */
static long step_of_name(const char *name) {
    if (strncmp(name, "step_", 5)) return -1;
    const char *d = name + 5;
    if (strlen(d) < 8) return -1;
    for (const char *q = d; *q; q++)
        if (*q < '0' || *q > '9') return -1;
    return strtol(d, NULL, 10);
}

/* ================================================================ failing together */

/* Collective: 0 when rc is 0 on every rank; otherwise -1 on every rank, each with the message of
 * the lowest failing rank in err. The message travels as doubles through allreduce_host_double
 * (only that rank contributes non-zero values), which every comm implements on host memory. */
static int agree(zt_comm *c, int rc, zt_err *err) {
    if (c->world == 1) return rc ? -1 : 0;
    int failed_rank = rc ? c->rank : c->world;
    int lowest = c->world - c->agree_max(c, c->world - failed_rank);
    if (lowest == c->world) return 0;
    enum { N = sizeof err->msg };
    double *buf = zt_xcalloc(N, sizeof *buf);
    if (c->rank == lowest)
        for (size_t i = 0; i < N; i++) buf[i] = (unsigned char)err->msg[i];
    c->allreduce_host_double(c, buf, N);
    for (size_t i = 0; i < N; i++) err->msg[i] = (char)(int)buf[i];
    err->msg[N - 1] = 0;
    free(buf);
    return -1;
}

/* Device buffers of the cpu backend are host memory: read and written in place, no staging. */
static int host_memory(const zt_backend *be) { return strcmp(be->name, "cpu") == 0; }

/* ================================================================ save: rank files */

static int write_slab(hid_t d, size_t off, size_t n, const float *buf) {
    hsize_t start = off, count = n;
    hid_t fs = H5Dget_space(d), ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    herr_t rc = H5Dwrite(d, H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, buf);
    H5Sclose(ms);
    H5Sclose(fs);
    return rc < 0 ? -1 : 0;
}

/* Writes dataset NAME of n fp32 values from SRC (device memory of be; host when stage is NULL)
 * with its per-chunk CRC32C attributes. */
static int write_vector(hid_t f, const char *path, const char *name, const zt_backend *be, const float *src,
                        size_t n, float *stage, size_t stage_cap, zt_err *err) {
    size_t C = chunk_elems(n), nch = (n + C - 1) / C;
    uint32_t *crc = zt_xcalloc(max_sz(nch, 1), sizeof *crc);
    hsize_t dim = n;
    hid_t sp = H5Screate_simple(1, &dim, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
    H5Pset_layout(dcpl, H5D_CONTIGUOUS);
    H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER); /* every element is written: no fill pass */
    hid_t d = H5Dcreate2(f, name, H5T_IEEE_F32LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    int rc = d < 0 ? -1 : 0;
    if (!rc && n && !stage) {
        crc_chunks(src, n, C, crc);
        rc = H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, src) < 0 ? -1 : 0;
    }
    size_t group = max_sz(1, stage_cap / C) * C; /* whole chunks per staged write */
    for (size_t x = 0; !rc && stage && x < n; x += group) {
        size_t k = min_sz(group, n - x);
        be->copy(stage, src + x, k * sizeof(float), ZT_D2H);
        crc_chunks(stage, k, C, crc + x / C);
        rc = write_slab(d, x, k, stage);
    }
    if (!rc) {
        hid_t u32 = H5T_STD_U32LE;
        unsigned long long c64 = C;
        hsize_t na = max_sz(nch, 1);
        hid_t asp = H5Screate_simple(1, &na, NULL);
        hid_t a = H5Acreate2(d, "crc32c", u32, asp, H5P_DEFAULT, H5P_DEFAULT);
        rc = a < 0 || H5Awrite(a, H5T_NATIVE_UINT32, crc) < 0 ? -1 : 0;
        if (a >= 0) H5Aclose(a);
        H5Sclose(asp);
        if (!rc) rc = put_u64(d, "checksum_chunk", c64);
        if (!rc) rc = put_str(d, "checksum", "crc32c of each checksum_chunk elements (little-endian bytes)");
    }
    char why[256];
    if (rc) zt_fail(err, "%s: cannot write dataset %s (%zu elements): %s", path, name, n, h5_why(why));
    if (d >= 0) H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    free(crc);
    return rc;
}

/* rank r's range of the saved partition */
static void rank_range(size_t total, size_t shard, int r, size_t *lo, size_t *hi) {
    *lo = min_sz((size_t)r * shard, total);
    *hi = min_sz(*lo + shard, total);
}

static void rank_file_name(char *buf, size_t cap, int r) { snprintf(buf, cap, "rank_%05d.h5", r); }

static int write_rank_file(const char *tmpdir, zt_engine *e, long step, zt_err *err) {
    char name[32], path[PATHCAP];
    rank_file_name(name, sizeof name, e->rank);
    if (path_join(path, sizeof path, tmpdir, name, err)) return -1;
    const zt_backend *be = e->be;
    int host = host_memory(be);
    float *stage = NULL;
    if (!host) {
        stage = be->host_alloc(ZT_STAGE_ELEMS * sizeof(float));
        if (!stage) return zt_fail(err, "%s: out of host memory for the staging buffer", path);
    }
    hid_t fapl = file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    char why[256];
    int rc = 0;
    if (f < 0) rc = zt_fail(err, "%s: cannot create: %s", path, h5_why(why));
    if (!rc && (put_u64(f, "lo", e->lo) || put_u64(f, "hi", e->hi) || put_i64(f, "rank", e->rank) ||
                put_i64(f, "world_size", e->world) || put_i64(f, "step", step) || put_str(f, "format", ZT_CKPT_FORMAT)))
        rc = zt_fail(err, "%s: cannot write attributes: %s", path, h5_why(why));
    /* the optimizer range starts at opt_lo: this rank's partition [lo, hi) starts lo - opt_lo into it.
     * With Twin-Flow offload the range is split between host and device memory: gather this rank's
     * partition into one host buffer through the engine (a shard of host memory, once per vector). */
    const float *vecs[3] = {e->master, e->adam_m, e->adam_v};
    float *gathered = e->host_n ? zt_xmalloc(max_sz(e->hi - e->lo, 1) * sizeof(float)) : NULL;
    for (int v = 0; v < 3 && !rc; v++) {
        if (gathered) {
            zt_engine_state_read(e, v, e->lo - e->opt_lo, e->hi - e->lo, gathered);
            rc = write_vector(f, path, vec_names[v], be, gathered, e->hi - e->lo, NULL, ZT_STAGE_ELEMS, err);
        } else {
            rc = write_vector(f, path, vec_names[v], be, vecs[v] + (e->lo - e->opt_lo), e->hi - e->lo, stage,
                              ZT_STAGE_ELEMS, err);
        }
    }
    free(gathered);
    if (f >= 0 && H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, h5_why(why));
    if (stage) be->host_free(stage);
    if (!rc) rc = fsync_path(path, err);
    return rc;
}

/* ================================================================ save: index */

/* maps virtual elements vstart/vcount (rank vrank) to elements [src_off, src_off + n) of rank
 * file r's dataset `dset` (which has src_len elements) */
static void add_mapping(hid_t dcpl, hid_t vspace, const hsize_t *vstart, const hsize_t *vcount, int r,
                        const char *dset, size_t src_len, size_t src_off, size_t n) {
    char file[32];
    rank_file_name(file, sizeof file, r);
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
    hsize_t dim = e->total;
    hid_t dcpl, vs;
    vds_layout(1, &dim, &dcpl, &vs);
    for (int r = 0; r < e->world; r++) {
        size_t lo, hi;
        rank_range(e->total, e->shard, r, &lo, &hi);
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
    for (int r = 0; r < e->world; r++) {
        size_t lo, hi;
        rank_range(e->total, e->shard, r, &lo, &hi);
        size_t x = max_sz(lo, p->offset), y = min_sz(hi, p->offset + p->numel);
        for (size_t u = x - p->offset, w = y - p->offset; x < y && u < w;) {
            size_t r0 = u / row, c0 = u % row, k;
            hsize_t st[2], cnt[2];
            if (c0 || w - u < row) {
                k = min_sz(row - c0, w - u);
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
    table_row *rows = zt_xcalloc((size_t)t->count, sizeof *rows);
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
    hid_t ty = table_row_type(), sp = H5Screate_simple(1, &n, NULL);
    hid_t d = H5Dcreate2(f, "param_table", ty, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int rc = d >= 0 && H5Dwrite(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) >= 0 ? 0 : -1;
    if (d >= 0) H5Dclose(d);
    H5Sclose(sp);
    H5Tclose(ty);
    free(rows);
    return rc;
}

static int write_index(const char *path, const zt_engine *e, const zt_gpt2_shape *shape, const zt_train_state *st,
                       const char *config, zt_err *err) {
    hid_t fapl = file_access();
    hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
    H5Pclose(fapl);
    char why[256];
    if (f < 0) return zt_fail(err, "%s: cannot create: %s", path, h5_why(why));
    int rc = put_str(f, "format", ZT_CKPT_FORMAT) || put_i64(f, "format_version", ZT_CKPT_VERSION) ||
             put_i64(f, "step", st->step) || put_i64(f, "tokens_seen", st->tokens_seen) ||
             put_i64(f, "world_size", e->world) || put_i64(f, "zero_stage", e->opt.stage) ||
             put_u64(f, "total", e->total) || put_u64(f, "shard", e->shard) || put_i64(f, "adam_t", e->adam_t) ||
             put_str(f, "config", config ? config : "") || put_str(f, "model", "gpt2") ||
             put_i64(f, "n_layer", shape->n_layer) || put_i64(f, "n_head", shape->n_head) ||
             put_i64(f, "n_embd", shape->n_embd) || put_i64(f, "vocab_size", shape->vocab_size) ||
             put_i64(f, "n_positions", shape->n_positions);
    hid_t g = rc ? -1 : H5Gcreate2(f, "state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0 || put_i64(g, "step", st->step) || put_i64(g, "tokens_seen", st->tokens_seen) ||
        put_i64(g, "data_samples", st->data_samples) || put_u64(g, "rng_state", st->rng_state) ||
        put_f64(g, "loss_scale", st->loss_scale) || put_i64(g, "loss_scale_good_steps", st->loss_scale_good_steps) ||
        put_i64(g, "hysteresis_left", st->hysteresis_left))
        rc = -1;
    h5_close(&g);
    if (!rc) rc = write_param_table(f, e->table);
    for (int v = 0; v < 3 && !rc; v++) rc = write_flat_vds(f, vec_names[v], e);
    g = rc ? -1 : H5Gcreate2(f, "params", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (g < 0) rc = -1;
    for (int i = 0; !rc && i < e->table->count; i++) rc = write_tensor_vds(g, &e->table->params[i], e);
    h5_close(&g);
    if (rc) zt_fail(err, "%s: cannot write the index: %s", path, h5_why(why));
    if (H5Fclose(f) < 0 && !rc) rc = zt_fail(err, "%s: cannot close: %s", path, h5_why(why));
    if (!rc) rc = fsync_path(path, err);
    return rc;
}

/* ================================================================ save: publish and prune */

static int write_latest(const char *dir, const char *name, zt_err *err) {
    char tmp[PATHCAP], dst[PATHCAP];
    if (path_join(tmp, sizeof tmp, dir, "latest.tmp", err) || path_join(dst, sizeof dst, dir, "latest", err)) return -1;
    FILE *fp = fopen(tmp, "w");
    if (!fp) return zt_fail(err, "%s: cannot create: %s", tmp, strerror(errno));
    int bad = fprintf(fp, "%s\n", name) < 0;
    bad |= fflush(fp) != 0 || fsync(fileno(fp)) != 0;
    bad |= fclose(fp) != 0;
    if (bad) return zt_fail(err, "%s: cannot write: %s", tmp, strerror(errno));
    if (rename(tmp, dst)) return zt_fail(err, "%s: cannot rename to %s: %s", tmp, dst, strerror(errno));
    return fsync_path(dir, err);
}

/* renames TMP (a complete step directory) to FINAL; an existing FINAL (the same step saved again)
 * is swapped out atomically (renameat2 RENAME_EXCHANGE) and then removed */
static int publish_dir(const char *dir, const char *tmp, const char *final, zt_err *err) {
    if (fsync_path(tmp, err)) return -1;
    if (is_dir(final)) {
        if (renameat2(AT_FDCWD, tmp, AT_FDCWD, final, RENAME_EXCHANGE) == 0) {
            rmtree(tmp);
        } else { /* file systems without exchange: a short window where FINAL is missing */
            char old[PATHCAP];
            if ((size_t)snprintf(old, sizeof old, "%s.old", tmp) >= sizeof old) return zt_fail(err, "%s: path too long", tmp);
            if (rename(final, old) || rename(tmp, final))
                return zt_fail(err, "%s: cannot replace with %s: %s", final, tmp, strerror(errno));
            rmtree(old);
        }
    } else if (rename(tmp, final)) {
        return zt_fail(err, "%s: cannot rename to %s: %s", tmp, final, strerror(errno));
    }
    return fsync_path(dir, err);
}

typedef struct { long step; char name[256]; } step_entry;
static int cmp_step(const void *a, const void *b) {
    long x = ((const step_entry *)a)->step, y = ((const step_entry *)b)->step;
    return x < y ? -1 : x > y;
}

/* complete step directories of DIR (step_%08ld holding index.h5), sorted by step; returns count */
static int list_steps(const char *dir, step_entry **out) {
    *out = NULL;
    DIR *d = opendir(dir);
    if (!d) return 0;
    int n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        long s = step_of_name(de->d_name);
        char idx[PATHCAP];
        if (s < 0 || strlen(de->d_name) >= sizeof(*out)->name) continue;
        if ((size_t)snprintf(idx, sizeof idx, "%s/%s/index.h5", dir, de->d_name) >= sizeof idx || !is_file(idx)) continue;
        if (n == cap) { cap = cap ? 2 * cap : 16; *out = realloc(*out, (size_t)cap * sizeof **out); }
        (*out)[n].step = s;
        snprintf((*out)[n].name, sizeof(*out)->name, "%s", de->d_name);
        n++;
    }
    closedir(d);
    if (n) qsort(*out, (size_t)n, sizeof **out, cmp_step);
    return n;
}

static void prune(const char *dir, const char *keep, int keep_last) {
    if (keep_last <= 0) return;
    step_entry *s;
    int n = list_steps(dir, &s), left = n;
    for (int i = 0; i < n && left > keep_last; i++) {
        if (!strcmp(s[i].name, keep)) continue;
        char p[PATHCAP];
        snprintf(p, sizeof p, "%s/%s", dir, s[i].name);
        if (rmtree(p)) zt_warn("checkpoint: cannot remove old %s: %s", p, strerror(errno));
        left--;
    }
    free(s);
}

/* removes .tmp_* entries: saves that crashed or failed before */
static void remove_leftovers(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (strncmp(de->d_name, ".tmp_", 5)) continue;
        char p[PATHCAP];
        if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, de->d_name) < sizeof p) rmtree(p);
    }
    closedir(d);
}

int zt_checkpoint_save(const char *dir, zt_engine *e, const zt_gpt2_shape *shape, const zt_train_state *st,
                       const char *config_text, int keep_last, zt_err *err) {
    h5_quiet q = h5_silence();
    double t0 = zt_now();
    char name[64], tmp[PATHCAP], final[PATHCAP], idx[PATHCAP];
    snprintf(name, sizeof name, "step_%08ld", st->step);
    int rc = 0;
    if (path_join(final, sizeof final, dir, name, err) || (size_t)snprintf(tmp, sizeof tmp, "%s/.tmp_%s", dir, name) >= sizeof tmp)
        rc = -1;
    /* rank 0 prepares an empty temporary directory; the others wait for it */
    if (!rc && e->rank == 0) {
        rc = mkdir_p(dir, err);
        if (!rc) remove_leftovers(dir);
        if (!rc && mkdir(tmp, 0777)) rc = zt_fail(err, "%s: cannot create directory: %s", tmp, strerror(errno));
    }
    if (agree(e->comm, rc, err)) goto out;
    e->be->synchronize();
    rc = write_rank_file(tmp, e, st->step, err);
    if (agree(e->comm, rc, err)) {
        if (e->rank == 0) rmtree(tmp);
        rc = -1;
        goto out;
    }
    if (e->rank == 0) {
        rc = path_join(idx, sizeof idx, tmp, "index.h5", err);
        if (!rc) rc = write_index(idx, e, shape, st, config_text, err);
        if (!rc) rc = publish_dir(dir, tmp, final, err);
        if (!rc) rc = write_latest(dir, name, err);
        if (!rc) prune(dir, name, keep_last);
    }
    rc = agree(e->comm, rc, err);
    if (!rc) {
        double dt = zt_now() - t0, bytes = 12.0 * (double)e->total;
        zt_info("checkpoint: saved %s (%.2f GB in %.2f s, %.2f GB/s)", final, bytes / 1e9, dt, bytes / 1e9 / dt);
    }
out:
    h5_restore(q);
    return rc ? -1 : 0;
}

/* ================================================================ resolve */

int zt_checkpoint_resolve(const char *path, char *step_dir, size_t cap, zt_err *err) {
    struct stat st;
    if (stat(path, &st)) {
        if (errno == ENOENT) return 0;
        return zt_fail(err, "%s: %s", path, strerror(errno));
    }
    char buf[PATHCAP];
    if (S_ISREG(st.st_mode)) { /* PATH/index.h5 names its step directory */
        const char *slash = strrchr(path, '/');
        if (strcmp(slash ? slash + 1 : path, "index.h5"))
            return zt_fail(err, "%s: not a checkpoint directory (expected a checkpoint or step directory)", path);
        snprintf(buf, sizeof buf, "%.*s", slash ? (int)(slash - path) : 1, slash ? path : ".");
        path = buf;
    } else if (!S_ISDIR(st.st_mode)) {
        return zt_fail(err, "%s: not a directory", path);
    }
    char p[PATHCAP];
    if (path_join(p, sizeof p, path, "index.h5", err)) return -1;
    if (is_file(p)) {
        if ((size_t)snprintf(step_dir, cap, "%s", path) >= cap) return zt_fail(err, "%s: path too long", path);
        return 1;
    }
    if (path_join(p, sizeof p, path, "latest", err)) return -1;
    if (is_file(p)) {
        size_t len;
        char *text = zt_read_file(p, &len, err);
        if (!text) return -1;
        text[strcspn(text, "\r\n")] = 0;
        int bad = !text[0] || strchr(text, '/') || strstr(text, "..");
        char sd[2 * PATHCAP];
        int too_long = (size_t)snprintf(sd, sizeof sd, "%s/%s", path, text) >= sizeof sd;
        char idx[2 * PATHCAP + 16];
        snprintf(idx, sizeof idx, "%s/index.h5", sd);
        if (bad) { zt_fail(err, "%s: does not name a step directory ('%s')", p, text); free(text); return -1; }
        if (too_long) { free(text); return zt_fail(err, "%s: path too long", p); }
        if (!is_file(idx)) {
            zt_fail(err, "%s names %s, which is missing or incomplete (no index.h5)", p, text);
            free(text);
            return -1;
        }
        free(text);
        if ((size_t)snprintf(step_dir, cap, "%s", sd) >= cap) return zt_fail(err, "%s: path too long", sd);
        return 1;
    }
    /* no `latest` (deleted by hand?): the newest complete step directory, if any */
    step_entry *s;
    int n = list_steps(path, &s);
    if (n) {
        zt_warn("checkpoint: %s has no 'latest' file; using its newest complete step directory %s", path, s[n - 1].name);
        int too_long = (size_t)snprintf(step_dir, cap, "%s/%s", path, s[n - 1].name) >= cap;
        free(s);
        if (too_long) return zt_fail(err, "%s: path too long", path);
        return 1;
    }
    return 0;
}

/* ================================================================ reader */

typedef struct src_info {
    int loaded;
    size_t lo, hi;
    size_t chunk[3];
    uint32_t *crc[3];
} src_info;

struct zt_checkpoint_reader {
    char dir[PATHCAP - 64]; /* room for "/rank_NNNNN.h5" in PATHCAP */
    char index_path[PATHCAP];
    hid_t index, vds[3];
    zt_checkpoint_meta meta;
    zt_train_state state;
    zt_param_table table;
    src_info *src;          /* [meta.world_size] */
    const zt_backend *stage_be; /* allocator of stage (NULL: malloc) */
    float *stage;
    size_t stage_cap;       /* elements */
};

void zt_checkpoint_meta_free(zt_checkpoint_meta *m) {
    free(m->config_text);
    m->config_text = NULL;
}

void zt_checkpoint_close(zt_checkpoint_reader *r) {
    if (!r) return;
    h5_quiet q = h5_silence();
    for (int v = 0; v < 3; v++) h5_close(&r->vds[v]);
    h5_close(&r->index);
    h5_restore(q);
    for (int s = 0; r->src && s < r->meta.world_size; s++)
        for (int v = 0; v < 3; v++) free(r->src[s].crc[v]);
    free(r->src);
    if (r->stage) { if (r->stage_be) r->stage_be->host_free(r->stage); else free(r->stage); }
    zt_param_table_free(&r->table);
    zt_checkpoint_meta_free(&r->meta);
    free(r);
}

const zt_checkpoint_meta *zt_checkpoint_reader_meta(const zt_checkpoint_reader *r) { return &r->meta; }
const zt_param_table *zt_checkpoint_reader_table(const zt_checkpoint_reader *r) { return &r->table; }
void zt_checkpoint_reader_state(const zt_checkpoint_reader *r, zt_train_state *st) { *st = r->state; }

static void rank_path(const zt_checkpoint_reader *r, int s, char *buf, size_t cap) {
    char name[32];
    rank_file_name(name, sizeof name, s);
    snprintf(buf, cap, "%s/%s", r->dir, name);
}

size_t zt_checkpoint_file_bytes(const zt_checkpoint_reader *r, int rank) {
    char p[PATHCAP];
    rank_path(r, rank, p, sizeof p);
    struct stat st;
    return stat(p, &st) == 0 ? (size_t)st.st_size : 0;
}

/* the saved parameter table must be exactly the one the saved shape defines */
static int check_saved_table(zt_checkpoint_reader *r, zt_err *err) {
    const char *path = r->index_path;
    char why[256];
    hid_t d = H5Dopen2(r->index, "param_table", H5P_DEFAULT);
    if (d < 0) return zt_fail(err, "%s: no dataset param_table: %s", path, h5_why(why));
    hid_t sp = H5Dget_space(d), ty = table_row_type();
    size_t n = (size_t)H5Sget_simple_extent_npoints(sp);
    table_row *rows = zt_xcalloc(max_sz(n, 1), sizeof *rows);
    int rc = H5Dread(d, ty, H5S_ALL, H5S_ALL, H5P_DEFAULT, rows) < 0 ? -1 : 0;
    H5Tclose(ty);
    H5Sclose(sp);
    H5Dclose(d);
    if (rc) { free(rows); return zt_fail(err, "%s: cannot read param_table: %s", path, h5_why(why)); }
    const zt_param_table *t = &r->table;
    if ((int)n != t->count) rc = zt_fail(err, "%s: param_table has %zu tensors, the saved model shape defines %d", path, n, t->count);
    for (int i = 0; !rc && i < t->count; i++) {
        const zt_param_info *p = &t->params[i];
        rows[i].name[sizeof rows[i].name - 1] = 0;
        if (strcmp(rows[i].name, p->name) || rows[i].offset != p->offset || rows[i].numel != p->numel)
            rc = zt_fail(err, "%s: param_table row %d (%s) does not match the saved model shape", path, i, rows[i].name);
    }
    free(rows);
    return rc;
}

/* opens an HDF5 file read-only; MISSING is the message (with the path as %s) when it does not exist */
static hid_t open_h5(const char *path, zt_err *err, const char *missing) {
    char why[256];
    if (!is_file(path)) {
        zt_fail(err, missing, path);
        return -1;
    }
#if H5_VERSION_GE(1, 12, 0)
    htri_t ok = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t ok = H5Fis_hdf5(path);
#endif
    if (ok <= 0) {
        zt_fail(err, "%s: not a readable HDF5 file (%s)", path, ok < 0 ? h5_why(why) : "no HDF5 signature");
        H5Eclear2(H5E_DEFAULT);
        return -1;
    }
    hid_t fapl = file_access();
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, fapl);
    H5Pclose(fapl);
    if (f < 0) zt_fail(err, "%s: cannot open (truncated or damaged?): %s", path, h5_why(why));
    return f;
}

static int read_meta(zt_checkpoint_reader *r, zt_err *err) {
    const char *path = r->index_path;
    hid_t f = r->index;
    char *fmt = get_str(f, "format");
    int ours = fmt && !strcmp(fmt, ZT_CKPT_FORMAT);
    free(fmt);
    if (!ours) return zt_fail(err, "%s: not a zerotrain checkpoint", path);
    long long ver = 0;
    if (get_i64(f, "format_version", &ver)) return zt_fail(err, "%s: no format_version attribute", path);
    if (ver != ZT_CKPT_VERSION)
        return zt_fail(err, "%s: checkpoint format version %lld is not supported (this zerotrain reads version %d)", path, ver,
                       ZT_CKPT_VERSION);
    zt_checkpoint_meta *m = &r->meta;
    m->format_version = (int)ver;
    long long v[12];
    static const char *const keys[12] = {"step", "tokens_seen", "adam_t", "world_size", "zero_stage", "total",
                                         "shard", "n_layer", "n_head", "n_embd", "vocab_size", "n_positions"};
    for (int i = 0; i < 12; i++)
        if (get_i64(f, keys[i], &v[i])) return zt_fail(err, "%s: missing or invalid attribute %s", path, keys[i]);
    m->step = v[0]; m->tokens_seen = v[1]; m->adam_t = v[2];
    m->world_size = (int)v[3]; m->zero_stage = (int)v[4];
    m->total = (size_t)v[5]; m->shard = (size_t)v[6];
    zt_gpt2_shape s = {(int)v[7], (int)v[8], (int)v[9], (int)v[10], (int)v[11], 0};
    s.padded_vocab = (s.vocab_size + 127) / 128 * 128;
    m->shape = s;
    m->config_text = get_str(f, "config");
    if (!m->config_text) m->config_text = zt_xstrdup("");
    if (m->world_size < 1 || m->shard == 0 || (size_t)m->world_size * m->shard < m->total)
        return zt_fail(err, "%s: inconsistent world_size %d, shard %zu, total %zu", path, m->world_size, m->shard, m->total);
    zt_err terr;
    if (zt_gpt2_param_table(&r->table, &s, &terr)) return zt_fail(err, "%s: %s", path, terr.msg);
    if (r->table.total != m->total)
        return zt_fail(err, "%s: total %zu does not match the saved model shape (%zu parameters)", path, m->total, r->table.total);
    if (check_saved_table(r, err)) return -1;
    /* trainer state */
    hid_t g = H5Gopen2(f, "state", H5P_DEFAULT);
    if (g < 0) return zt_fail(err, "%s: no group state", path);
    long long a[5] = {0};
    static const char *const skeys[5] = {"step", "tokens_seen", "data_samples", "loss_scale_good_steps", "hysteresis_left"};
    int bad = 0;
    for (int i = 0; i < 5; i++) bad |= get_i64(g, skeys[i], &a[i]);
    unsigned long long rng = 0;
    if (H5Aexists(g, "rng_state") > 0) {
        hid_t at = H5Aopen(g, "rng_state", H5P_DEFAULT);
        bad |= H5Aread(at, H5T_NATIVE_ULLONG, &rng) < 0;
        H5Aclose(at);
    } else {
        bad = 1;
    }
    double ls = 1;
    bad |= get_f64(g, "loss_scale", &ls);
    H5Gclose(g);
    if (bad) return zt_fail(err, "%s: incomplete group state", path);
    zt_train_state st = {a[0], a[1], a[2], rng, ls, (int)a[3], (int)a[4]};
    r->state = st;
    return 0;
}

static zt_checkpoint_reader *reader_open(const char *step_dir, const zt_backend *stage_be, zt_err *err) {
    zt_checkpoint_reader *r = zt_xcalloc(1, sizeof *r);
    r->index = r->vds[0] = r->vds[1] = r->vds[2] = -1;
    r->stage_be = stage_be;
    char why[256];
    if ((size_t)snprintf(r->dir, sizeof r->dir, "%s", step_dir) >= sizeof r->dir) {
        zt_fail(err, "%s: path too long", step_dir);
        goto fail;
    }
    if (path_join(r->index_path, sizeof r->index_path, step_dir, "index.h5", err)) goto fail;
    r->index = open_h5(r->index_path, err, "%s: missing (not a checkpoint step directory)");
    if (r->index < 0 || read_meta(r, err)) goto fail;
    r->src = zt_xcalloc((size_t)r->meta.world_size, sizeof *r->src);
    for (int s = 0; s < r->meta.world_size; s++) {
        char p[PATHCAP];
        rank_path(r, s, p, sizeof p);
        if (!is_file(p)) { zt_fail(err, "missing shard %s", p); goto fail; }
    }
    /* source files resolve against the step directory, wherever the process runs */
    hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
    char prefix[PATHCAP + 1];
    snprintf(prefix, sizeof prefix, "%s/", step_dir);
    H5Pset_virtual_prefix(dapl, prefix);
    for (int v = 0; v < 3; v++) {
        r->vds[v] = H5Dopen2(r->index, vec_names[v], dapl);
        hsize_t dim = 0;
        hid_t sp = r->vds[v] >= 0 ? H5Dget_space(r->vds[v]) : -1;
        if (sp >= 0) { H5Sget_simple_extent_dims(sp, &dim, NULL); H5Sclose(sp); }
        if (r->vds[v] < 0 || dim != r->meta.total) {
            H5Pclose(dapl);
            zt_fail(err, "%s: dataset %s is missing or not of %zu elements (%s)", r->index_path, vec_names[v], r->meta.total,
                    h5_why(why));
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
    h5_quiet q = h5_silence();
    zt_checkpoint_reader *r = reader_open(step_dir, NULL, err);
    h5_restore(q);
    return r;
}

/* opens rank file s once: validates its lo/hi/step and dataset sizes, reads the chunk CRCs */
static int src_load(zt_checkpoint_reader *r, int s, zt_err *err) {
    src_info *si = &r->src[s];
    if (si->loaded) return 0;
    char p[PATHCAP], why[256];
    rank_path(r, s, p, sizeof p);
    rank_range(r->meta.total, r->meta.shard, s, &si->lo, &si->hi);
    hid_t f = open_h5(p, err, "missing shard %s");
    if (f < 0) return -1;
    long long lo = -1, hi = -1, step = -1;
    int rc = 0;
    if (get_i64(f, "lo", &lo) || get_i64(f, "hi", &hi) || get_i64(f, "step", &step))
        rc = zt_fail(err, "%s: not a zerotrain shard (no lo/hi/step attributes)", p);
    else if ((size_t)lo != si->lo || (size_t)hi != si->hi || step != r->meta.step)
        rc = zt_fail(err, "%s: holds elements [%lld, %lld) of step %lld, the index expects [%zu, %zu) of step %ld", p, lo, hi,
                     step, si->lo, si->hi, r->meta.step);
    size_t n = si->hi - si->lo;
    for (int v = 0; v < 3 && !rc; v++) {
        hid_t d = H5Dopen2(f, vec_names[v], H5P_DEFAULT);
        if (d < 0) { rc = zt_fail(err, "%s: no dataset %s (%s)", p, vec_names[v], h5_why(why)); break; }
        hid_t sp = H5Dget_space(d);
        hsize_t dim = 0;
        H5Sget_simple_extent_dims(sp, &dim, NULL);
        H5Sclose(sp);
        long long C = 0;
        if (dim != n) rc = zt_fail(err, "%s: dataset %s has %llu elements, expected %zu", p, vec_names[v], (unsigned long long)dim, n);
        else if (get_i64(d, "checksum_chunk", &C) || C <= 0)
            rc = zt_fail(err, "%s: dataset %s has no checksum_chunk attribute", p, vec_names[v]);
        if (!rc) {
            si->chunk[v] = (size_t)C;
            size_t nch = max_sz((n + si->chunk[v] - 1) / si->chunk[v], 1);
            si->crc[v] = zt_xcalloc(nch, sizeof(uint32_t));
            if (get_u32s(d, "crc32c", si->crc[v], nch))
                rc = zt_fail(err, "%s: dataset %s has no valid crc32c attribute (%zu values expected)", p, vec_names[v], nch);
        }
        H5Dclose(d);
    }
    H5Fclose(f);
    si->loaded = !rc;
    return rc;
}

/* reads virtual elements [off, off + n) of vector v into host memory */
static int read_vds(zt_checkpoint_reader *r, int v, size_t off, size_t n, float *out, zt_err *err) {
    if (!n) return 0;
    hsize_t start = off, count = n;
    hid_t fs = H5Dget_space(r->vds[v]), ms = H5Screate_simple(1, &count, NULL);
    H5Sselect_hyperslab(fs, H5S_SELECT_SET, &start, NULL, &count, NULL);
    herr_t rc = H5Dread(r->vds[v], H5T_NATIVE_FLOAT, ms, fs, H5P_DEFAULT, out);
    H5Sclose(ms);
    H5Sclose(fs);
    char why[256];
    if (rc < 0) return zt_fail(err, "%s: cannot read %s[%zu:%zu]: %s", r->index_path, vec_names[v], off, off + n, h5_why(why));
    return 0;
}

/* checks chunks [c, c + k) of shard s (data holds them, from the chunk c's first element) */
static int verify(zt_checkpoint_reader *r, int s, int v, size_t c, const float *data, size_t n, zt_err *err) {
    const src_info *si = &r->src[s];
    size_t C = si->chunk[v], k = (n + C - 1) / C;
    uint32_t *got = zt_xcalloc(max_sz(k, 1), sizeof *got);
    crc_chunks(data, n, C, got);
    int rc = 0;
    for (size_t i = 0; i < k; i++) {
        if (got[i] == si->crc[v][c + i]) continue;
        char p[PATHCAP];
        rank_path(r, s, p, sizeof p);
        size_t a = (c + i) * C, b = min_sz(a + C, si->hi - si->lo);
        rc = zt_fail(err, "%s: checksum mismatch in dataset %s (elements %zu..%zu of the shard)", p, vec_names[v], a, b);
        break;
    }
    free(got);
    return rc;
}

/* where verified data goes: elements of [a, b) are either read straight into direct (host memory;
 * direct[0] is element a), or handed to sink in pieces of at most stage_cap elements */
typedef int (*sink_fn)(void *ctx, size_t global_off, const float *host, size_t n);
typedef struct { float *direct; sink_fn sink; void *ctx; } target;

static int ensure_stage(zt_checkpoint_reader *r, size_t need, zt_err *err) {
    if (r->stage_cap >= need) return 0;
    if (r->stage) { if (r->stage_be) r->stage_be->host_free(r->stage); else free(r->stage); }
    r->stage = r->stage_be ? r->stage_be->host_alloc(need * sizeof(float)) : malloc(need * sizeof(float));
    r->stage_cap = r->stage ? need : 0;
    if (!r->stage) return zt_fail(err, "out of host memory for a %zu MiB read buffer", need * sizeof(float) >> 20);
    return 0;
}

static int deliver(const target *t, size_t a, size_t off, const float *host, size_t n) {
    if (t->direct) { memcpy(t->direct + (off - a), host, n * sizeof(float)); return 0; }
    return t->sink(t->ctx, off, host, n);
}

/* Reads elements [a, b) of vector v, verifying the CRC of every chunk it touches. Whole chunks
 * inside [a, b) go straight into t->direct when there is one; the rest is staged. */
static int read_range(zt_checkpoint_reader *r, int v, size_t a, size_t b, const target *t, zt_err *err) {
    if (b > r->meta.total || a > b)
        return zt_fail(err, "%s: elements [%zu, %zu) are outside %s (%zu elements)", r->index_path, a, b, vec_names[v],
                       r->meta.total);
    for (int s = (int)(a / r->meta.shard); a < b && s < r->meta.world_size; s++) {
        if (src_load(r, s, err)) return -1;
        const src_info *si = &r->src[s];
        size_t x = max_sz(a, si->lo), y = min_sz(b, si->hi);
        if (x >= y) continue;
        size_t C = si->chunk[v], c = (x - si->lo) / C, cend = (y - si->lo + C - 1) / C;
        if (ensure_stage(r, max_sz(C, ZT_STAGE_ELEMS / C * C), err)) return -1;
        size_t group = r->stage_cap / C;
        while (c < cend) {
            size_t clo = si->lo + c * C, chi = min_sz(clo + C, si->hi);
            if (t->direct && clo >= x && chi <= y) { /* run of whole chunks: in place */
                size_t c2 = c + 1;
                while (c2 < cend && min_sz(si->lo + (c2 + 1) * C, si->hi) <= y) c2++;
                size_t rhi = min_sz(si->lo + c2 * C, si->hi);
                float *dst = t->direct + (clo - a);
                if (read_vds(r, v, clo, rhi - clo, dst, err) || verify(r, s, v, c, dst, rhi - clo, err)) return -1;
                c = c2;
                continue;
            }
            size_t c2 = t->direct ? c + 1 : min_sz(cend, c + group);
            size_t ghi = min_sz(si->lo + c2 * C, si->hi);
            if (read_vds(r, v, clo, ghi - clo, r->stage, err) || verify(r, s, v, c, r->stage, ghi - clo, err)) return -1;
            size_t ua = max_sz(clo, x), ub = min_sz(ghi, y);
            if (deliver(t, a, ua, r->stage + (ua - clo), ub - ua)) return zt_fail(err, "%s: cannot deliver data", r->index_path);
            c = c2;
        }
    }
    return 0;
}

int zt_checkpoint_read(zt_checkpoint_reader *r, zt_ckpt_vector v, size_t offset, size_t n, float *out, zt_err *err) {
    h5_quiet q = h5_silence();
    target t = {out, NULL, NULL};
    int rc = read_range(r, (int)v, offset, offset + n, &t, err);
    h5_restore(q);
    return rc;
}

static int discard(void *ctx, size_t off, const float *host, size_t n) { (void)ctx; (void)off; (void)host; (void)n; return 0; }

int zt_checkpoint_verify(zt_checkpoint_reader *r, zt_err *err) {
    h5_quiet q = h5_silence();
    int rc = 0;
    for (int s = 0; s < r->meta.world_size && !rc; s++) rc = src_load(r, s, err);
    target t = {NULL, discard, NULL};
    for (int v = 0; v < 3 && !rc; v++) rc = read_range(r, v, 0, r->meta.total, &t, err);
    h5_restore(q);
    return rc;
}

/* ================================================================ load */

typedef struct load_ctx {
    const zt_backend *be;
    void *dst;          /* device buffer; element `base` of the flat vector is dst[0] */
    size_t base;
    float *tmp;         /* device fp32 scratch (16-bit backends) */
    float *master;      /* 16-bit backends: also copy [opt_lo, opt_hi) here */
    size_t opt_lo, opt_hi;
} load_ctx;

/* fp32 device buffer: copy up */
static int sink_f32(void *ctx, size_t off, const float *host, size_t n) {
    load_ctx *c = ctx;
    c->be->copy((float *)c->dst + (off - c->base), host, n * sizeof(float), ZT_H2D);
    return 0;
}

/* 16-bit compute params: fp32 up to scratch, converted into params; the optimizer range also into master */
static int sink_convert(void *ctx, size_t off, const float *host, size_t n) {
    load_ctx *c = ctx;
    const zt_backend *be = c->be;
    be->copy(c->tmp, host, n * sizeof(float), ZT_H2D);
    be->to_compute((char *)c->dst + (off - c->base) * zt_dtype_size(be->compute_dtype), c->tmp, n);
    size_t x = max_sz(off, c->opt_lo), y = min_sz(off + n, c->opt_hi);
    if (c->master && x < y) be->copy(c->master + (x - c->opt_lo), c->tmp + (x - off), (y - x) * sizeof(float), ZT_D2D);
    return 0;
}

/* Twin-Flow: optimizer state goes wherever the engine keeps it (host part, device part) */
typedef struct { zt_engine *e; int which; } state_ctx;
static int sink_state(void *ctx, size_t off, const float *host, size_t n) {
    state_ctx *c = ctx;
    zt_engine_state_write(c->e, c->which, off - c->e->opt_lo, n, host);
    return 0;
}

/* the current model must be the saved one, tensor by tensor */
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
            if (a->ndim == 2) snprintf(sa, sizeof sa, "[%d, %d]", a->shape[0], a->shape[1]);
            else snprintf(sa, sizeof sa, "[%d]", a->shape[0]);
            if (b->ndim == 2) snprintf(sb, sizeof sb, "[%d, %d]", b->shape[0], b->shape[1]);
            else snprintf(sb, sizeof sb, "[%d]", b->shape[0]);
            return zt_fail(err, "%s: checkpoint is for a different model: tensor %s has shape %s, the config needs %s", path,
                           a->name, sa, sb);
        }
        if (a->offset != b->offset)
            return zt_fail(err, "%s: checkpoint is for a different model: tensor %s is at offset %zu, the config needs %zu", path,
                           a->name, a->offset, b->offset);
    }
    return 0;
}

static int load_local(const char *step_dir, zt_engine *e, zt_train_state *st, zt_checkpoint_meta *meta, zt_err *err) {
    const zt_backend *be = e->be;
    int host = host_memory(be), fp32 = be->compute_dtype == ZT_F32;
    zt_checkpoint_reader *r = reader_open(step_dir, host ? NULL : be, err);
    if (!r) return -1;
    int rc = check_model(r, e->table, err);
    float *tmp = NULL;
    /* parameters: the full vector at stages 0-2, the shard at stage 3 */
    size_t pa = e->opt.stage == 3 ? e->lo : 0, pb = e->opt.stage == 3 ? e->hi : e->total;
    int split = e->host_n > 0; /* Twin-Flow: master/m/v of the optimizer range through the engine */
    load_ctx pc = {be, e->params, pa, NULL, split ? NULL : e->master, e->opt_lo, e->opt_hi};
    target pt = {NULL, sink_f32, &pc};
    if (!fp32) {
        /* staged pieces are at most the staging size (whole chunks): the scratch matches it */
        size_t cap = max_sz(ZT_STAGE_ELEMS, chunk_elems(r->meta.shard));
        tmp = be->alloc(cap * sizeof(float));
        if (!tmp && !rc) rc = zt_fail(err, "out of %s memory for a %zu MiB load buffer", be->name, cap * 4 >> 20);
        pc.tmp = tmp;
        pt.sink = sink_convert;
    } else if (host) {
        pt.direct = (float *)e->params; /* fp32: master aliases params, so this fills both */
    }
    if (!rc) rc = read_range(r, ZT_CKPT_MASTER, pa, pb, &pt, err);
    /* Adam moments of the optimizer range (and with Twin-Flow the master too) */
    float *mv[2] = {e->adam_m, e->adam_v};
    for (int k = 0; k < 2 && !rc && !split; k++) {
        load_ctx c = {be, mv[k], e->opt_lo, NULL, NULL, 0, 0};
        target t = {host ? mv[k] : NULL, sink_f32, &c};
        rc = read_range(r, ZT_CKPT_ADAM_M + k, e->opt_lo, e->opt_hi, &t, err);
    }
    for (int v = 0; v < 3 && !rc && split; v++) {
        state_ctx c = {e, v};
        target t = {NULL, sink_state, &c};
        rc = read_range(r, v, e->opt_lo, e->opt_hi, &t, err);
    }
    be->synchronize();
    if (tmp) be->free(tmp);
    if (!rc) {
        e->adam_t = r->meta.adam_t;
        if (st) *st = r->state;
        if (meta) {
            *meta = r->meta;
            meta->config_text = zt_xstrdup(r->meta.config_text);
        }
    }
    zt_checkpoint_close(r);
    return rc;
}

int zt_checkpoint_load(const char *step_dir, zt_engine *e, zt_train_state *st, zt_checkpoint_meta *meta, zt_err *err) {
    h5_quiet q = h5_silence();
    double t0 = zt_now();
    if (meta) memset(meta, 0, sizeof *meta);
    int rc = load_local(step_dir, e, st, meta, err);
    rc = agree(e->comm, rc, err);
    if (rc && meta) zt_checkpoint_meta_free(meta);
    if (!rc) zt_info("checkpoint: loaded %s in %.2f s", step_dir, zt_now() - t0);
    h5_restore(q);
    return rc;
}
