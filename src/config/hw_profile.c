/* hw_profile.c — reading a hardware profile (hw_profile.h) and pricing work with it.
 * The file is read with the config module's YAML reader (yaml_read.h: the same size, depth and
 * syntax checks as a config file) and walked against the key table below: each key names its
 * field, its unit (the factor from the file's unit to SI) and its range. Sections are implied by
 * the dotted names, so the walk needs no second table of sections. */
#include "config/hw_profile.h"

#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "config/yaml_read.h"

/* H_CURVE_OPTIONAL: a curve a profile may leave out (the long-GEMM curves calibrate measures on a CPU) */
enum { H_NAME, H_NUM, H_INT, H_BYTES, H_CURVE, H_CURVE_OPTIONAL };

typedef struct hw_key {
    const char *path;
    int kind;
    size_t off;
    double unit;   /* file value * unit = the stored value */
    double lo, hi; /* range of the file value (H_NUM, H_INT, H_BYTES before the unit) */
} hw_key;

#define O(f) offsetof(zt_hw_profile, f)
#define G(dt) (offsetof(zt_hw_profile, gemm) + (dt) * sizeof(zt_hw_gemm))
static const hw_key keys[] = {
    {"name", H_NAME, 0, 1, 0, 0},
    {"device.memory", H_BYTES, O(dev_memory), 1, 1 << 20, 1e15},
    {"device.memory_bandwidth_gbs", H_NUM, O(dev_bw), 1e9, 1e-4, 1e5},
    {"device.launch_us", H_NUM, O(launch_s), 1e-6, 0, 1e4},
    {"device.kernel_min_us", H_NUM, O(kernel_min_s), 1e-6, 0, 1e4},
    {"device.sync_us", H_NUM, O(sync_s), 1e-6, 0, 1e4},
    {"device.operand_gbs", H_NUM, O(operand_bw), 1e9, 0, 1e5},
    {"device.round_gbs", H_NUM, O(round_bw), 1e9, 0, 1e5},
    {"device.xent_gbs", H_NUM, O(xent_bw), 1e9, 0, 1e5},
    {"device.gemm.fp32.peak_tflops", H_NUM, G(ZT_F32) + offsetof(zt_hw_gemm, peak_flops), 1e12, 1e-6, 1e5},
    {"device.gemm.fp32.efficiency", H_CURVE, G(ZT_F32) + offsetof(zt_hw_gemm, square), 1, 0, 0},
    {"device.gemm.fp32.long_out", H_CURVE_OPTIONAL, G(ZT_F32) + offsetof(zt_hw_gemm, long_out), 1, 0, 0},
    {"device.gemm.fp32.long_k", H_CURVE_OPTIONAL, G(ZT_F32) + offsetof(zt_hw_gemm, long_k), 1, 0, 0},
    {"device.gemm.fp32.long_rows", H_CURVE_OPTIONAL, G(ZT_F32) + offsetof(zt_hw_gemm, long_rows), 1, 0, 0},
    {"device.gemm.bf16.peak_tflops", H_NUM, G(ZT_BF16) + offsetof(zt_hw_gemm, peak_flops), 1e12, 1e-6, 1e5},
    {"device.gemm.bf16.efficiency", H_CURVE, G(ZT_BF16) + offsetof(zt_hw_gemm, square), 1, 0, 0},
    {"device.gemm.bf16.long_out", H_CURVE_OPTIONAL, G(ZT_BF16) + offsetof(zt_hw_gemm, long_out), 1, 0, 0},
    {"device.gemm.bf16.long_k", H_CURVE_OPTIONAL, G(ZT_BF16) + offsetof(zt_hw_gemm, long_k), 1, 0, 0},
    {"device.gemm.bf16.long_rows", H_CURVE_OPTIONAL, G(ZT_BF16) + offsetof(zt_hw_gemm, long_rows), 1, 0, 0},
    {"device.gemm.fp16.peak_tflops", H_NUM, G(ZT_F16) + offsetof(zt_hw_gemm, peak_flops), 1e12, 1e-6, 1e5},
    {"device.gemm.fp16.efficiency", H_CURVE, G(ZT_F16) + offsetof(zt_hw_gemm, square), 1, 0, 0},
    {"device.gemm.fp16.long_out", H_CURVE_OPTIONAL, G(ZT_F16) + offsetof(zt_hw_gemm, long_out), 1, 0, 0},
    {"device.gemm.fp16.long_k", H_CURVE_OPTIONAL, G(ZT_F16) + offsetof(zt_hw_gemm, long_k), 1, 0, 0},
    {"device.gemm.fp16.long_rows", H_CURVE_OPTIONAL, G(ZT_F16) + offsetof(zt_hw_gemm, long_rows), 1, 0, 0},
    {"device.attention_tflops.fp32", H_NUM, O(attn_flops) + ZT_F32 * sizeof(double), 1e12, 1e-6, 1e5},
    {"device.attention_tflops.bf16", H_NUM, O(attn_flops) + ZT_BF16 * sizeof(double), 1e12, 1e-6, 1e5},
    {"device.attention_tflops.fp16", H_NUM, O(attn_flops) + ZT_F16 * sizeof(double), 1e12, 1e-6, 1e5},
    {"pcie.h2d_pinned_gbs", H_NUM, O(h2d_pinned), 1e9, 0.01, 1e4},
    {"pcie.d2h_pinned_gbs", H_NUM, O(d2h_pinned), 1e9, 0.01, 1e4},
    {"pcie.h2d_pageable_gbs", H_NUM, O(h2d_pageable), 1e9, 0.01, 1e4},
    {"pcie.d2h_pageable_gbs", H_NUM, O(d2h_pageable), 1e9, 0.01, 1e4},
    {"pcie.latency_us", H_NUM, O(pcie_latency_s), 1e-6, 0, 1e5},
    {"host.memory", H_BYTES, O(host_memory), 1, 1 << 20, 1e16},
    {"host.memory_bandwidth_gbs", H_NUM, O(host_bw), 1e9, 0.1, 1e5},
    {"host.cores", H_INT, O(host_cores), 1, 1, 1 << 16},
    {"host.adam_gelems_per_core", H_NUM, O(adam_per_core), 1e9, 1e-4, 100},
    {"host.memcpy_gbs", H_NUM, O(memcpy_bw), 1e9, 0.01, 1e4},
    {"nvme.read_gbs", H_NUM, O(nvme_read), 1e9, 0.001, 1e4},
    {"nvme.write_gbs", H_NUM, O(nvme_write), 1e9, 0.001, 1e4},
    {"nvme.latency_us", H_NUM, O(nvme_latency_s), 1e-6, 0, 1e6},
    {"network.intra_node.bandwidth_gbs", H_NUM, O(intra_bw), 1e9, 0.001, 1e5},
    {"network.intra_node.latency_us", H_NUM, O(intra_lat_s), 1e-6, 0, 1e6},
    {"network.inter_node.bandwidth_gbs", H_NUM, O(inter_bw), 1e9, 0.001, 1e5},
    {"network.inter_node.latency_us", H_NUM, O(inter_lat_s), 1e-6, 0, 1e6},
    {"network.gpus_per_node", H_INT, O(gpus_per_node), 1, 1, 1024},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

typedef struct walk {
    zt_hw_profile *p;
    const char *file;
    yaml_document_t *doc;
    zt_err *err;
    int seen[NKEYS];
} walk;

static int fail_node(const walk *w, const yaml_node_t *n, const char *path, const char *fmt, const char *detail) {
    return zt_fail(w->err, "%s:%zu:%zu: %s: %s%s", w->file, n->start_mark.line + 1, n->start_mark.column + 1, path, fmt,
                   detail ? detail : "");
}

/* [[size, efficiency], ...]: sizes increasing and positive, efficiencies in (0, 1] */
static int read_curve(walk *w, const hw_key *k, const yaml_node_t *v) {
    zt_hw_curve *g = (zt_hw_curve *)((char *)w->p + k->off);
    const char *want = "expected a list of [size, efficiency] pairs, sizes increasing, efficiencies in (0, 1]";
    if (v->type != YAML_SEQUENCE_NODE) return fail_node(w, v, k->path, want, NULL);
    int n = (int)(v->data.sequence.items.top - v->data.sequence.items.start);
    if (n < 1 || n > ZT_HW_CURVE_MAX) return fail_node(w, v, k->path, want, " (1 to 16 pairs)");
    for (int i = 0; i < n; i++) {
        const yaml_node_t *pair = yaml_document_get_node(w->doc, v->data.sequence.items.start[i]);
        double s, e;
        if (!pair || pair->type != YAML_SEQUENCE_NODE || pair->data.sequence.items.top - pair->data.sequence.items.start != 2 ||
            zt_yaml_number(yaml_document_get_node(w->doc, pair->data.sequence.items.start[0]), &s) ||
            zt_yaml_number(yaml_document_get_node(w->doc, pair->data.sequence.items.start[1]), &e) || !(s > 0) ||
            !(e > 0 && e <= 1) || (i > 0 && s <= g->size[i - 1]))
            return fail_node(w, pair ? pair : v, k->path, want, NULL);
        g->size[i] = s, g->eff[i] = e;
    }
    g->n = n;
    return 0;
}

static int read_value(walk *w, const hw_key *k, const yaml_node_t *v) {
    char got[96], range[128];
    double d;
    void *field = (char *)w->p + k->off;
    if (k->kind == H_CURVE || k->kind == H_CURVE_OPTIONAL) return read_curve(w, k, v);
    if (k->kind == H_NAME) {
        if (v->type != YAML_SCALAR_NODE || !v->data.scalar.length || v->data.scalar.length >= sizeof w->p->name)
            return fail_node(w, v, k->path, "expected a short name", NULL);
        memcpy(w->p->name, v->data.scalar.value, v->data.scalar.length + 1);
        return 0;
    }
    zt_yaml_describe(v, got, sizeof got);
    if (k->kind == H_BYTES) {
        if (v->type != YAML_SCALAR_NODE || zt_parse_bytes((const char *)v->data.scalar.value, &d) || d < k->lo || d > k->hi)
            return fail_node(w, v, k->path, "expected a size like 80GiB, got ", got);
        *(double *)field = d;
        return 0;
    }
    snprintf(range, sizeof range, "expected a number in [%g, %g], got ", k->lo, k->hi);
    if (zt_yaml_number(v, &d) || !(d >= k->lo && d <= k->hi) || (k->kind == H_INT && d != floor(d)))
        return fail_node(w, v, k->path, range, got);
    if (k->kind == H_INT) *(int *)field = (int)d;
    else *(double *)field = d * k->unit;
    return 0;
}

/* whether some key lies below section `path` */
static int is_section(const char *path) {
    size_t n = strlen(path);
    for (int i = 0; i < NKEYS; i++)
        if (!strncmp(keys[i].path, path, n) && keys[i].path[n] == '.') return 1;
    return 0;
}

static int walk_map(walk *w, const char *path, const yaml_node_t *map) {
    if (map->type != YAML_MAPPING_NODE) {
        char got[96];
        zt_yaml_describe(map, got, sizeof got);
        return fail_node(w, map, *path ? path : "(top level)", "expected a mapping, got ", got);
    }
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top; pr++) {
        const yaml_node_t *k = yaml_document_get_node(w->doc, pr->key), *v = yaml_document_get_node(w->doc, pr->value);
        if (!k || k->type != YAML_SCALAR_NODE || !v) return zt_fail(w->err, "%s: expected key names", w->file);
        char full[256];
        snprintf(full, sizeof full, "%s%s%s", path, *path ? "." : "", (const char *)k->data.scalar.value);
        int found = 0;
        for (int i = 0; i < NKEYS && !found; i++)
            if (!strcmp(keys[i].path, full)) {
                if (w->seen[i]) return fail_node(w, k, full, "given twice", NULL);
                if (read_value(w, &keys[i], v)) return -1;
                w->seen[i] = found = 1;
            }
        if (found) continue;
        if (is_section(full)) {
            if (walk_map(w, full, v)) return -1;
            continue;
        }
        const char *cands[NKEYS];
        for (int i = 0; i < NKEYS; i++) cands[i] = keys[i].path;
        char sug[160];
        zt_suggest(full, cands, NKEYS, sug, sizeof sug);
        return fail_node(w, k, full, "unknown key of a hardware profile", sug);
    }
    return 0;
}

/* the file a name stands for: the first of the search directories that has NAME.yaml */
static int resolve(const char *spec, char *out, size_t cap, zt_err *err) {
    size_t len = strlen(spec);
    if (strchr(spec, '/') || (len > 5 && !strcmp(spec + len - 5, ".yaml"))) {
        if (len >= cap) return zt_fail(err, "hardware profile path too long");
        memcpy(out, spec, len + 1);
        return 0;
    }
    char dirs[3][PATH_MAX] = {"", "", "configs/hw"};
    const char *env = getenv("ZEROTRAIN_HW_DIR");
    if (env && *env) snprintf(dirs[0], sizeof dirs[0], "%s", env);
    char exe[PATH_MAX];
    if (zt_exe_dir(exe, sizeof exe) == 0) snprintf(dirs[1], sizeof dirs[1], "%.*s/configs/hw", PATH_MAX - 16, exe);
    for (int i = 0; i < 3; i++) {
        if (!dirs[i][0]) continue;
        int w = snprintf(out, cap, "%.*s/%.*s.yaml", (int)(cap / 2), dirs[i], (int)(cap / 4), spec);
        if (w > 0 && (size_t)w < cap && access(out, R_OK) == 0) return 0;
    }
    return zt_fail(err, "hardware profile '%s': no %s.yaml in $ZEROTRAIN_HW_DIR, %s or ./configs/hw (the shipped ones: "
                        "h100-sxm, h100-pcie, h200, a100-40gb, v100-32gb; or give a file path)",
                   spec, spec, dirs[1][0] ? dirs[1] : "the executable's configs/hw");
}

int zt_hw_profile_load(zt_hw_profile *p, const char *spec, zt_err *err) {
    memset(p, 0, sizeof *p);
    if (resolve(spec, p->path, sizeof p->path, err)) return -1;
    yaml_document_t doc;
    if (zt_yaml_read_file(p->path, &doc, err)) return -1;
    walk w = {.p = p, .file = p->path, .doc = &doc, .err = err};
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    int rc = root ? walk_map(&w, "", root) : 0;
    for (int i = 0; rc == 0 && i < NKEYS; i++)
        if (!w.seen[i] && keys[i].kind != H_CURVE_OPTIONAL) rc = zt_fail(err, "%s: missing key %s (a profile gives every cost)", p->path, keys[i].path);
    yaml_document_delete(&doc);
    return rc;
}

/* ---------------------------------------------------------------- costs */

static double curve_at(const zt_hw_curve *c, double s) {
    if (s <= c->size[0]) return c->eff[0];
    for (int i = 1; i < c->n; i++)
        if (s <= c->size[i]) {
            double f = log(s / c->size[i - 1]) / log(c->size[i] / c->size[i - 1]);
            return c->eff[i - 1] + f * (c->eff[i] - c->eff[i - 1]);
        }
    return c->eff[c->n - 1];
}

double zt_hw_gemm_efficiency(const zt_hw_profile *p, zt_dtype dt, double M, double N, double K) {
    const zt_hw_gemm *g = &p->gemm[dt];
    double e = curve_at(&g->square, cbrt(fmax(M * N * K, 1.0)));
    if (K > M && K > N && g->long_k.n) e = fmin(e, curve_at(&g->long_k, sqrt(M * N)));
    else if (M > K && M > N && (g->long_rows.n || g->long_out.n))
        e = fmin(e, curve_at(g->long_rows.n ? &g->long_rows : &g->long_out, sqrt(N * K)));
    else if (N > K && N > M && g->long_out.n) e = fmin(e, curve_at(&g->long_out, sqrt(M * K)));
    return e;
}

double zt_hw_gemm_seconds(const zt_hw_profile *p, zt_dtype dt, double M, double N, double K) {
    if (M <= 0 || N <= 0 || K <= 0) return 0;
    double t = 2.0 * M * N * K / (p->gemm[dt].peak_flops * zt_hw_gemm_efficiency(p, dt, M, N, K));
    return fmax(t, p->kernel_min_s);
}

double zt_hw_attention_seconds(const zt_hw_profile *p, zt_dtype dt, double flops) {
    return fmax(flops / p->attn_flops[dt], p->kernel_min_s);
}

double zt_hw_elementwise_seconds(const zt_hw_profile *p, double bytes) {
    return fmax(bytes / p->dev_bw, p->kernel_min_s);
}

double zt_hw_xent_seconds(const zt_hw_profile *p, double bytes) {
    return fmax(bytes / (p->xent_bw > 0 ? p->xent_bw : p->dev_bw), p->kernel_min_s);
}

double zt_hw_operand_seconds(const zt_hw_profile *p, double widened, double rounded) {
    return (p->operand_bw > 0 ? widened / p->operand_bw : 0) + (p->round_bw > 0 ? rounded / p->round_bw : 0);
}

double zt_hw_pcie_seconds(const zt_hw_profile *p, zt_copy_kind kind, int pinned, double bytes) {
    double bw = kind == ZT_H2D ? (pinned ? p->h2d_pinned : p->h2d_pageable) : (pinned ? p->d2h_pinned : p->d2h_pageable);
    return p->pcie_latency_s + bytes / bw;
}

double zt_hw_host_adam_seconds(const zt_hw_profile *p, double n, int threads, double bytes_per_elem) {
    int t = threads < 1 || threads > p->host_cores ? p->host_cores : threads; /* 0: OpenMP's default, every core */
    double compute = n / (p->adam_per_core * t), memory = n * bytes_per_elem / p->host_bw;
    return fmax(compute, memory);
}

double zt_hw_host_copy_seconds(const zt_hw_profile *p, double bytes, int threads) {
    int t = threads < 1 || threads > p->host_cores ? p->host_cores : threads;
    return bytes / fmin(p->memcpy_bw * t, p->host_bw);
}

double zt_hw_nvme_seconds(const zt_hw_profile *p, int write, double bytes) {
    return p->nvme_latency_s + bytes / (write ? p->nvme_write : p->nvme_read);
}
