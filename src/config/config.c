/* config.c — loading a config (see config.h): the file is read with libyaml's document API
 * (yaml_read.c; nodes keep their marks, so every error names FILE:LINE:COL); here each value is judged
 * against its key (type, range, names) as the walk meets it. The key table of config_keys.c drives both
 * the file walk and `--set` overrides, so both get the same types, ranges and near-miss
 * suggestions. Overrides win before anything is judged: the paths they set are listed first, and
 * the file walk skips those keys unread, so `--set` repairs any value a file is refused for, and
 * `--set KEY=null` removes a key. Files over ZT_CONFIG_MAX_BYTES or nested deeper than
 * ZT_CONFIG_MAX_DEPTH are refused before the document is built. Cross-key checks (config_checks.c)
 * run once, after all overrides, using the position where each key was last set (kept in the config
 * for the sized checks of engine/config_sizes.c); the DeepSpeed rules (config_deepspeed.c) run just
 * before them. */
#include "config/config.h"
#include "config/config_schema.h"
#include "config/yaml_read.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                               */

/* number syntax accepted for plain scalars: [+-]digits[.digits][e[+-]digits]; 1 = integer form,
 * 2 = float form, 0 = not a number */
static int number_form(const char *s) {
    const char *p = s;
    int digits = 0, isint = 1;
    if (*p == '+' || *p == '-') p++;
    while (isdigit((unsigned char)*p)) p++, digits++;
    if (*p == '.') {
        p++;
        isint = 0;
        while (isdigit((unsigned char)*p)) p++, digits++;
    }
    if (!digits) return 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        isint = 0;
        if (*p == '+' || *p == '-') p++;
        if (!isdigit((unsigned char)*p)) return 0;
        while (isdigit((unsigned char)*p)) p++;
    }
    return *p ? 0 : (isint ? 1 : 2);
}

/* ------------------------------------------------------------------------------------------ */
/* scalars                                                                                     */

enum { C_NULL, C_BOOL, C_NUM, C_STR, C_SEQ, C_MAP };

typedef struct scalar {
    int cls;
    const char *text; /* scalar text (NUL-terminated by libyaml) */
    int quoted;
    int b;            /* C_BOOL */
    int form;         /* C_NUM: 1 integer text, 2 float text */
    double d;         /* C_NUM */
} scalar;

static void classify(const yaml_node_t *n, scalar *s) {
    memset(s, 0, sizeof *s);
    s->text = "";
    if (!n) { s->cls = C_NULL; return; }
    if (n->type == YAML_SEQUENCE_NODE) { s->cls = C_SEQ; return; }
    if (n->type == YAML_MAPPING_NODE) { s->cls = C_MAP; return; }
    s->text = (const char *)n->data.scalar.value;
    s->quoted = n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE;
    if (s->quoted) { s->cls = C_STR; return; }
    const char *t = s->text;
    static const char *const nulls[] = {"", "~", "null", "Null", "NULL", NULL};
    static const char *const trues[] = {"true", "True", "TRUE", "yes", "Yes", "YES", "on", "On", "ON", NULL};
    static const char *const falses[] = {"false", "False", "FALSE", "no", "No", "NO", "off", "Off", "OFF", NULL};
    for (int i = 0; nulls[i]; i++)
        if (!strcmp(t, nulls[i])) { s->cls = C_NULL; return; }
    for (int i = 0; trues[i]; i++)
        if (!strcmp(t, trues[i])) { s->cls = C_BOOL; s->b = 1; return; }
    for (int i = 0; falses[i]; i++)
        if (!strcmp(t, falses[i])) { s->cls = C_BOOL; s->b = 0; return; }
    s->form = number_form(t);
    if (s->form) {
        s->cls = C_NUM;
        s->d = strtod(t, NULL);
        return;
    }
    s->cls = C_STR;
}

/* What a node is, for "got ..." */
static void describe(const yaml_node_t *n, char *out, size_t cap) {
    scalar s;
    classify(n, &s);
    switch (s.cls) {
    case C_NULL: snprintf(out, cap, "null"); break;
    case C_SEQ: snprintf(out, cap, "a list"); break;
    case C_MAP: snprintf(out, cap, "a mapping"); break;
    case C_BOOL:
    case C_NUM: snprintf(out, cap, "%.60s", s.text); break;
    default: snprintf(out, cap, "string '%.60s%s'", s.text, strlen(s.text) > 60 ? "..." : ""); break;
    }
}

static void fmt_num(double v, char *out, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(out, cap, "%.0f", v);
    else snprintf(out, cap, "%g", v);
}

/* "an integer >= 1", "a number in [0, 1]", "a number > 0" */
static void range_desc(const zt_keydef *d, int integer, double cap_hi, char *out, size_t cap) {
    const char *what = integer ? "an integer" : "a number";
    double hi = d->hi < cap_hi ? d->hi : cap_hi;
    char lo_s[32], hi_s[32];
    fmt_num(d->lo, lo_s, sizeof lo_s);
    fmt_num(hi, hi_s, sizeof hi_s);
    if (d->hi >= cap_hi || isinf(d->hi)) snprintf(out, cap, "%s %s %s", what, d->lo_excl ? ">" : ">=", lo_s);
    else snprintf(out, cap, "%s in %s%s, %s]", what, d->lo_excl ? "(" : "[", lo_s, hi_s);
}

/* ------------------------------------------------------------------------------------------ */
/* the loader                                                                                  */

typedef zt_loader loader;

/* Position prefix for node n at key path (path NULL: position only). */
static void where_of(const loader *L, const yaml_node_t *n, const char *path, char *out, size_t cap) {
    if (L->ov) {
        if (!path || !strcmp(path, L->ov)) snprintf(out, cap, "--set %s", L->ov);
        else snprintf(out, cap, "--set %s: %s", L->ov, path);
    } else {
        size_t line = n ? n->start_mark.line + 1 : 1, col = n ? n->start_mark.column + 1 : 1;
        if (path) snprintf(out, cap, "%s:%zu:%zu: %s", L->file, line, col, path);
        else snprintf(out, cap, "%s:%zu:%zu", L->file, line, col);
    }
}

static int fail_at(const loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail_at(const loader *L, const yaml_node_t *n, const char *path, const char *fmt, ...) {
    char w[512], m[768];
    where_of(L, n, path, w, sizeof w);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return zt_fail(L->err, "%s: %s", w, m);
}

static void record(loader *L, const char *path, const yaml_node_t *n, int is_auto) {
    if (L->nrec == L->caprec) {
        L->caprec = L->caprec ? 2 * L->caprec : 64;
        L->recs = zt_xrealloc(L->recs, (size_t)L->caprec * sizeof *L->recs);
    }
    zt_posrec *r = &L->recs[L->nrec++];
    snprintf(r->path, sizeof r->path, "%s", path);
    r->is_auto = is_auto;
    where_of(L, n, path, r->where, sizeof r->where);
}

void zt_config_refresh_text(zt_config *cfg) {
    free(cfg->effective_text);
    cfg->effective_text = zt_config_effective_text(cfg);
}

int zt_config_was_set(const zt_config *cfg, const char *path) {
    for (int i = 0; i < cfg->n_set_at; i++)
        if (!strcmp(cfg->set_at[i].path, path)) return 1;
    return 0;
}

int zt_config_fail_key(const zt_config *cfg, const char *path, zt_err *err, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    return zt_fail_at_rec(cfg->set_at, cfg->n_set_at, cfg->source_path, path, err, m);
}

/* whether list (paths, each ending in a newline) holds path itself (exact) or path or a section above it */
static int listed(const zt_sb *list, const char *path, int exact) {
    size_t plen = strlen(path);
    for (const char *e = list->p; e && e < list->p + list->n;) {
        const char *nl = strchr(e, '\n');
        size_t len = (size_t)(nl - e);
        if (exact ? len == plen && !memcmp(e, path, len)
                  : len <= plen && !memcmp(e, path, len) && (path[len] == '\0' || path[len] == '.'))
            return 1;
        e = nl + 1;
    }
    return 0;
}

/* A file key an override sets (or removes) is not read: its value there is never judged. */
static int unread_in_file(loader *L, const char *path) {
    if (L->ov || !listed(&L->replaced, path, 0)) return 0;
    zt_sb_printf(&L->unread, "%s\n", path);
    return 1;
}

static void *field(zt_config *cfg, size_t off) { return (char *)cfg + off; }

static void set_str(char **slot, const char *text) {
    free(*slot);
    *slot = (text && *text) ? zt_xstrdup(text) : NULL;
}

/* Reads an integer into *out, with the range of d capped at cap_hi. */
static int get_integer(const loader *L, const zt_keydef *d, const char *path, const yaml_node_t *v, double cap_hi,
                       long long *out) {
    scalar s;
    classify(v, &s);
    char want[160], got[96];
    range_desc(d, 1, cap_hi, want, sizeof want);
    describe(v, got, sizeof got);
    if (s.cls != C_NUM) return fail_at(L, v, path, "expected %s, got %s", want, got);
    long long x;
    if (s.form == 1) {
        errno = 0;
        x = strtoll(s.text, NULL, 10);
        if (errno == ERANGE) return fail_at(L, v, path, "expected %s, got %s", want, got);
    } else {
        if (s.d != floor(s.d) || fabs(s.d) > 9.0e18) return fail_at(L, v, path, "expected %s, got %s", want, got);
        x = (long long)s.d;
    }
    double hi = d->hi < cap_hi ? d->hi : cap_hi;
    if ((double)x < d->lo || (d->lo_excl && (double)x == d->lo) || (double)x > hi)
        return fail_at(L, v, path, "expected %s, got %s", want, got);
    *out = x;
    return 0;
}

static int get_number(const loader *L, const zt_keydef *d, const char *path, const yaml_node_t *v, double *out) {
    scalar s;
    classify(v, &s);
    char want[160], got[96];
    range_desc(d, 0, INFINITY, want, sizeof want);
    describe(v, got, sizeof got);
    if (s.cls != C_NUM || !isfinite(s.d)) return fail_at(L, v, path, "expected %s, got %s", want, got);
    if (s.d < d->lo || (d->lo_excl && s.d == d->lo) || s.d > d->hi)
        return fail_at(L, v, path, "expected %s, got %s", want, got);
    *out = s.d;
    return 0;
}

static int get_bool(const loader *L, const char *path, const yaml_node_t *v, int *out) {
    scalar s;
    classify(v, &s);
    if (s.cls != C_BOOL) {
        char got[96];
        describe(v, got, sizeof got);
        return fail_at(L, v, path, "expected true or false, got %s", got);
    }
    *out = s.b;
    return 0;
}

/* A non-null scalar's text, or an error naming `want`. */
static int get_text(const loader *L, const char *path, const yaml_node_t *v, const char *want, const char **out) {
    scalar s;
    classify(v, &s);
    if (s.cls == C_NULL || s.cls == C_SEQ || s.cls == C_MAP) {
        char got[96];
        describe(v, got, sizeof got);
        return fail_at(L, v, path, "expected %s, got %s", want, got);
    }
    *out = s.text;
    return 0;
}

static int get_enum(const loader *L, const char *path, const yaml_node_t *v, const zt_enumval *ev, int *out) {
    char list[160];
    zt_enum_list(ev, list, sizeof list);
    const char *t = NULL;
    if (get_text(L, path, v, list, &t)) return -1;
    for (const zt_enumval *e = ev; e->name; e++)
        if (!strcasecmp(e->name, t)) {
            *out = e->value;
            return 0;
        }
    char got[96], sug[96];
    describe(v, got, sizeof got);
    zt_enum_suggest(t, ev, sug, sizeof sug);
    return fail_at(L, v, path, "expected %s, got %s%s", list, got, sug);
}

static int in_list(const char *t, const char *const *list) {
    for (; *list; list++)
        if (!strcasecmp(*list, t)) return 1;
    return 0;
}

static int apply_map(loader *L, const char *path, const yaml_document_t *doc, const yaml_node_t *map, int tag);

/* The refusal of a bool that asks for a feature zerotrain does not implement. */
static int refuse_bool(const loader *L, const zt_keydef *d, const char *path, const yaml_node_t *v, int b) {
    char tail[320] = "";
    if (d->hint) snprintf(tail, sizeof tail, " (%s)", d->hint);
    return fail_at(L, v, path, "%s is not supported by zerotrain (only %s)%s", b ? "true" : "false",
                   b ? "false" : "true", tail);
}

/* A DeepSpeed feature section (amp, curriculum_learning, ...): fine while `enabled` is false or
 * absent (DeepSpeed's default for each); the feature's other keys are not read. */
static int apply_off_section(loader *L, const zt_keydef *d, const char *path, const yaml_document_t *doc,
                             const yaml_node_t *v) {
    scalar s;
    classify(v, &s);
    if (s.cls == C_NULL) return 0;
    if (s.cls != C_MAP) {
        char got[96];
        describe(v, got, sizeof got);
        return fail_at(L, v, path, "expected a mapping, got %s", got);
    }
    for (yaml_node_pair_t *p = v->data.mapping.pairs.start; p < v->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node((yaml_document_t *)doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE || strcmp((const char *)k->data.scalar.value, "enabled")) continue;
        const yaml_node_t *e = yaml_document_get_node((yaml_document_t *)doc, p->value);
        char child[256];
        snprintf(child, sizeof child, "%s.enabled", path);
        if (unread_in_file(L, child)) continue;
        int b = 0;
        if (get_bool(L, child, e, &b)) return -1;
        if (b) return fail_at(L, e, child, "true is not supported by zerotrain (%s)", d->hint);
    }
    return 0;
}

static int is_auto_text(const scalar *s) { return s->cls == C_STR && !strcasecmp(s->text, "auto"); }

/* whether null is a value of key d (else `--set KEY=null` removes it) */
static int takes_null(const zt_keydef *d) {
    return d->kind == K_SECTION || d->kind == K_OFF_SECTION || d->kind == K_NOTE || d->kind == K_STR ||
           (d->flags & F_NULL_DEFAULT) || d->tag == T_TB || d->tag == T_MICRO || d->tag == T_ACCUM;
}

/* `--set KEY=null` for a key that takes no null: KEY as if never given (its value in the file was
 * not read): the default, no record for the cross-key checks to blame */
static void remove_key(loader *L, const zt_keydef *d, const char *path) {
    zt_key_set_default(L->cfg, d);
    if (d->tag == T_ADAM_W_MODE) L->adam_w_mode = 1;
    if (d->tag == T_ACT_ENABLED) L->act_enabled_given = 0;
    if (d->tag == T_SCHED_TYPE) L->sched_type_given = 0;
    int kept = 0;
    for (int i = 0; i < L->nrec; i++)
        if (strcmp(L->recs[i].path, path)) L->recs[kept++] = L->recs[i];
    L->nrec = kept;
}

static int apply_key(loader *L, const zt_keydef *d, const char *path, const yaml_document_t *doc,
                     const yaml_node_t *key, const yaml_node_t *v) {
    zt_config *cfg = L->cfg;
    const yaml_node_t *at_key = key ? key : v;
    scalar null_check;
    classify(v, &null_check);
    if (L->ov && null_check.cls == C_NULL && !takes_null(d)) {
        remove_key(L, d, path);
        return 0;
    }
    switch (d->kind) {
    case K_NOTE: {
        char w[512];
        where_of(L, at_key, NULL, w, sizeof w);
        if (d->hint) zt_info("%s: note: %s", w, d->hint);
        else zt_info("%s: note: ignoring DeepSpeed key '%s' (it has no effect in zerotrain)", w, path);
        return 0;
    }
    case K_DSKEY:
        if (d->hint) return fail_at(L, at_key, NULL, "%s %s", path, d->hint);
        return fail_at(L, at_key, NULL, "%s is a DeepSpeed key zerotrain does not support", path);
    case K_OFF_SECTION: return apply_off_section(L, d, path, doc, v);
    case K_SECTION: return apply_map(L, path, doc, v, d->tag);
    default: break;
    }
    scalar s;
    classify(v, &s);
    char got[96];
    describe(v, got, sizeof got);

    /* "auto": Hugging Face's placeholder; the key takes its default now, and config_deepspeed.c
     * derives the ones that depend on other keys */
    if (is_auto_text(&s) && (d->flags & F_AUTO)) {
        record(L, path, v, 1);
        zt_key_set_default(cfg, d);
        if (d->tag == T_MICRO) cfg->micro_batch_given = 0;
        if (d->tag == T_ACCUM) cfg->grad_accum_given = 0;
        return 0;
    }
    record(L, path, v, 0);

    /* null for "not given" style keys */
    if (s.cls == C_NULL) {
        switch (d->tag) {
        case T_TB: cfg->train_batch_size = 0; return 0;
        case T_MICRO: zt_key_set_default(cfg, d); cfg->micro_batch_given = 0; return 0;
        case T_ACCUM: zt_key_set_default(cfg, d); cfg->grad_accum_given = 0; return 0;
        default: break;
        }
        if (d->flags & F_NULL_DEFAULT) {
            zt_key_set_default(cfg, d);
            return 0;
        }
    }

    void *f = d->off == ZT_NOF ? NULL : field(cfg, d->off);
    switch (d->kind) {
    case K_INT: {
        long long x;
        if (get_integer(L, d, path, v, (double)INT_MAX, &x)) return -1;
        *(int *)f = (int)x;
        if (d->tag == T_MICRO) cfg->micro_batch_given = 1;
        if (d->tag == T_ACCUM) cfg->grad_accum_given = 1;
        return 0;
    }
    case K_LONG: {
        long long x;
        if (get_integer(L, d, path, v, (double)LONG_MAX, &x)) return -1;
        *(long *)f = (long)x;
        return 0;
    }
    case K_U64: {
        if (s.cls != C_NUM || s.form != 1 || s.text[0] == '-')
            return fail_at(L, v, path, "expected an integer >= 0, got %s", got);
        errno = 0;
        unsigned long long x = strtoull(s.text, NULL, 10);
        if (errno == ERANGE) return fail_at(L, v, path, "expected an integer in [0, 2^64), got %s", got);
        *(unsigned long long *)f = x;
        return 0;
    }
    case K_FLOAT: {
        double x;
        if (get_number(L, d, path, v, &x)) return -1;
        float fl = strtof(s.text, NULL);
        if (!isfinite(fl)) return fail_at(L, v, path, "expected a number within single-precision range, got %s", got);
        *(float *)f = fl;
        return 0;
    }
    case K_DOUBLE: {
        double x;
        if (get_number(L, d, path, v, &x)) return -1;
        *(double *)f = x;
        return 0;
    }
    case K_BOOL: {
        int b = 0;
        if (get_bool(L, path, v, &b)) return -1;
        if (((d->flags & F_ONLY_FALSE) && b) || ((d->flags & F_ONLY_TRUE) && !b)) return refuse_bool(L, d, path, v, b);
        if (d->tag == T_ADAM_W_MODE) L->adam_w_mode = b;
        if (d->tag == T_ACT_ENABLED) L->act_enabled_given = 1;
        if (d->tag == T_CPU_OFFLOAD) { /* true = offload_optimizer.device cpu; false leaves it */
            if (b) cfg->offload_device = ZT_OFFLOAD_CPU;
            return 0;
        }
        if (f) *(int *)f = b;
        return 0;
    }
    case K_STR: {
        if (s.cls == C_NULL) {
            set_str((char **)f, NULL);
            return 0;
        }
        const char *t = NULL;
        if (get_text(L, path, v, "a string", &t)) return -1;
        if (!*t) /* "" would read as unset (checkpoint.dir "" = no checkpoints, silently): say null when meaning none */
            return fail_at(L, v, path, "expected a string, got an empty one (null means none)");
        set_str((char **)f, t);
        return 0;
    }
    case K_ENUM:
    case K_ENUMSTR: {
        if (d->ds_names) {
            char list[160];
            zt_enum_list(d->ev, list, sizeof list);
            const char *t = NULL;
            if (get_text(L, path, v, list, &t)) return -1;
            if (in_list(t, d->ds_names))
                return fail_at(L, v, path, "%s is a DeepSpeed %s zerotrain does not support (expected %s)", t, d->what,
                               list);
        }
        int x = 0;
        if (get_enum(L, path, v, d->ev, &x)) return -1;
        if (d->kind == K_ENUMSTR) set_str((char **)f, zt_enum_name(d->ev, x));
        else *(int *)f = x;
        if (d->tag == T_SCHED_TYPE) L->sched_type_given = L->sched_seen = 1;
        return 0;
    }
    case K_BETAS: {
        if (!v || v->type != YAML_SEQUENCE_NODE || v->data.sequence.items.top - v->data.sequence.items.start != 2)
            return fail_at(L, v, path, "expected a list of two numbers [beta1, beta2], got %s", got);
        float b[2];
        for (int i = 0; i < 2; i++) {
            const yaml_node_t *e = yaml_document_get_node((yaml_document_t *)doc, v->data.sequence.items.start[i]);
            scalar es;
            classify(e, &es);
            if (es.cls != C_NUM || !(es.d >= d->lo && es.d < d->hi)) {
                char eg[96];
                describe(e, eg, sizeof eg);
                return fail_at(L, e, path, "beta%d: expected a number in [0, 1), got %s", i + 1, eg);
            }
            b[i] = strtof(es.text, NULL);
        }
        *(float *)f = b[0];
        *(float *)field(cfg, d->off2) = b[1];
        return 0;
    }
    case K_RATIO:
        if (is_auto_text(&s)) {
            *(double *)f = -1.0;
            return 0;
        }
        if (s.cls != C_NUM || !(s.d >= d->lo && s.d <= d->hi))
            return fail_at(L, v, path, "expected a number in [0, 1] or \"auto\", got %s", got);
        *(double *)f = s.d;
        return 0;
    case K_BYTES: {
        double bytes;
        if ((s.cls == C_NUM && s.d >= 0 && isfinite(s.d) && (bytes = s.d, 1)) ||
            (s.cls == C_STR && zt_parse_bytes(s.text, &bytes) == 0)) {
            *(double *)f = floor(bytes);
            return 0;
        }
        return fail_at(L, v, path, "expected a byte count >= 0 (a number or a string like \"40GiB\"), got %s", got);
    }
    case K_RESUME: {
        const char *t = NULL;
        if (get_text(L, path, v, "auto, never or a checkpoint path", &t)) return -1;
        char **slot = field(cfg, d->off2);
        set_str(slot, NULL);
        if (!strcmp(t, "auto")) *(int *)f = ZT_RESUME_AUTO;
        else if (!strcmp(t, "never")) *(int *)f = ZT_RESUME_NEVER;
        else {
            *(int *)f = ZT_RESUME_PATH;
            set_str(slot, t);
        }
        return 0;
    }
    default: break;
    }
    return fail_at(L, v, path, "internal error: unhandled key kind");
}

/* "base.name" ("name" at the top); a path longer than cap is cut, and matches no key */
static void join_path(char *out, size_t cap, const char *base, const char *name) {
    size_t n = 0;
    for (const char *p = base && *base ? base : ""; *p && n + 1 < cap; p++) out[n++] = *p;
    if (base && *base && n + 1 < cap) out[n++] = '.';
    for (const char *p = name; *p && n + 1 < cap; p++) out[n++] = *p;
    out[n] = '\0';
}

/* the declaration of key `name` directly under section `parent`, or NULL */
static const zt_keydef *find_child(const char *parent, const char *name) {
    char full[256];
    join_path(full, sizeof full, parent, name);
    return zt_key_find(full);
}

static int apply_map(loader *L, const char *path, const yaml_document_t *doc, const yaml_node_t *map, int tag) {
    scalar s;
    classify(map, &s);
    if (s.cls == C_NULL) return 0; /* "section:" with nothing under it */
    if (s.cls != C_MAP) {
        char got[96];
        describe(map, got, sizeof got);
        if (*path) return fail_at(L, map, path, "expected a mapping, got %s", got);
        return fail_at(L, map, NULL, "expected a mapping of config keys at the top level, got %s", got);
    }
    yaml_node_pair_t *start = map->data.mapping.pairs.start, *top = map->data.mapping.pairs.top;
    if (tag == T_SCHED && top > start) {
        L->sched_seen = 1;
        record(L, "scheduler", map, 0);
    }
    for (yaml_node_pair_t *p = start; p < top; p++) {
        const yaml_node_t *k = yaml_document_get_node((yaml_document_t *)doc, p->key);
        const yaml_node_t *v = yaml_document_get_node((yaml_document_t *)doc, p->value);
        if (!k || k->type != YAML_SCALAR_NODE) {
            char got[96];
            describe(k, got, sizeof got);
            return fail_at(L, k, NULL, "expected a key name, got %s", got);
        }
        const char *name = (const char *)k->data.scalar.value;
        for (yaml_node_pair_t *q = start; q < p; q++) {
            const yaml_node_t *k2 = yaml_document_get_node((yaml_document_t *)doc, q->key);
            if (k2 && k2->type == YAML_SCALAR_NODE && !strcmp((const char *)k2->data.scalar.value, name)) {
                if (L->ov)
                    return fail_at(L, k, NULL, "duplicate key '%s'%s%s", name, *path ? " in " : "", path);
                return fail_at(L, k, NULL, "duplicate key '%s'%s%s (first at line %zu)", name, *path ? " in " : "",
                               path, k2->start_mark.line + 1);
            }
        }
        char full[256];
        join_path(full, sizeof full, path, name);
        if (unread_in_file(L, full)) continue;
        const zt_keydef *d = strchr(name, '.') ? NULL : find_child(path, name);
        if (!d) {
            char sug[128];
            zt_key_suggest(name, path, sug, sizeof sug);
            return fail_at(L, k, NULL, "unknown key '%.80s'%s%s%s", name, *path ? " in " : "", path, sug);
        }
        if (tag == T_ACT) L->act_seen = 1;
        if (apply_key(L, d, d->path, doc, k, v)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the file and the overrides                                                                  */

int zt_yaml_number(const yaml_node_t *n, double *out) {
    scalar s;
    classify(n, &s);
    if (s.cls != C_NUM) return -1;
    *out = s.d;
    return 0;
}

void zt_yaml_describe(const yaml_node_t *n, char *out, size_t cap) { describe(n, out, cap); }

static int load_file(loader *L, const char *path) {
    yaml_document_t doc;
    if (zt_yaml_read_file(path, &doc, L->err)) return -1;
    int rc = 0;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root) {
        L->file = path;
        rc = apply_map(L, "", &doc, root, T_NONE);
        L->file = NULL;
    }
    yaml_document_delete(&doc);
    return rc;
}

/* The paths node sets at path: a mapping's keys (recursively; it is merged into the section), else path. */
static void list_paths(zt_sb *out, const char *path, yaml_document_t *doc, const yaml_node_t *n, int depth) {
    if (!n || n->type != YAML_MAPPING_NODE || depth > ZT_CONFIG_MAX_DEPTH) {
        zt_sb_printf(out, "%s\n", path);
        return;
    }
    for (yaml_node_pair_t *p = n->data.mapping.pairs.start; p < n->data.mapping.pairs.top; p++) {
        const yaml_node_t *k = yaml_document_get_node(doc, p->key);
        if (!k || k->type != YAML_SCALAR_NODE) continue;
        char child[256];
        join_path(child, sizeof child, path, (const char *)k->data.scalar.value);
        list_paths(out, child, doc, yaml_document_get_node(doc, p->value), depth + 1);
    }
}

/* Before the file is read: what the overrides will set (a malformed one is reported in its turn). */
static void collect_replaced(loader *L, char *const *overrides, int n) {
    for (int i = 0; i < n; i++) {
        char key[256];
        yaml_document_t doc;
        zt_err ignored;
        if (zt_yaml_read_override(overrides[i], key, &doc, &ignored)) continue;
        list_paths(&L->replaced, key, &doc, yaml_document_get_root_node(&doc), 0);
        yaml_document_delete(&doc);
    }
}

static int apply_override(loader *L, const char *spec) {
    char key[256];
    yaml_document_t doc;
    if (zt_yaml_read_override(spec, key, &doc, L->err)) return -1;
    const yaml_node_t *root = yaml_document_get_root_node(&doc);
    scalar value;
    classify(root, &value);

    L->ov = key;
    int rc = 0;
    const zt_keydef *d = NULL;
    char sofar[256] = "";
    const char *p = key;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char comp[128];
        if (n == 0 || n >= sizeof comp) {
            rc = zt_fail(L->err, "--set %s: expected a dotted key like optimizer.params.lr", key);
            break;
        }
        memcpy(comp, p, n);
        comp[n] = '\0';
        d = find_child(sofar, comp);
        if (!d && value.cls == C_NULL && (L->overrides_only || listed(&L->unread, key, 1))) break; /* a file key removed unread */
        if (!d) {
            char sug[128];
            zt_key_suggest(comp, sofar, sug, sizeof sug);
            rc = zt_fail(L->err, "--set %s: unknown key '%s'%s%s%s", key, comp, *sofar ? " in " : "", sofar, sug);
            break;
        }
        snprintf(sofar, sizeof sofar, "%s", d->path);
        if (!dot || d->kind == K_NOTE || d->kind == K_DSKEY) {
            rc = apply_key(L, d, sofar, &doc, NULL, root);
            break;
        }
        if (d->kind == K_OFF_SECTION) { /* only its `enabled` is read */
            int b = 0;
            if (!strcmp(dot + 1, "enabled") && !(rc = get_bool(L, key, root, &b)) && b)
                rc = fail_at(L, root, key, "true is not supported by zerotrain (%s)", d->hint);
            break;
        }
        if (d->kind != K_SECTION) {
            rc = zt_fail(L->err, "--set %s: %s is a value, not a section", key, sofar);
            break;
        }
        if (d->tag == T_SCHED) {
            L->sched_seen = 1;
            record(L, "scheduler", root, 0);
        }
        if (d->tag == T_ACT && strcmp(dot + 1, "enabled") != 0) L->act_seen = 1;
        p = dot + 1;
    }
    L->ov = NULL;
    yaml_document_delete(&doc);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* public API                                                                                  */

int zt_config_check_overrides(char *const *overrides, int n_overrides, zt_err *err) {
    zt_config cfg;
    zt_config_defaults(&cfg);
    loader L;
    memset(&L, 0, sizeof L);
    L.cfg = &cfg;
    L.err = err;
    L.adam_w_mode = 1;
    L.overrides_only = 1;
    int rc = 0;
    for (int i = 0; rc == 0 && i < n_overrides; i++) rc = apply_override(&L, overrides[i]);
    free(L.recs);
    free(L.replaced.p);
    free(L.unread.p);
    zt_config_free(&cfg);
    return rc;
}

int zt_config_load(zt_config *cfg, const char *path, char *const *overrides, int n_overrides, zt_err *err) {
    zt_config_defaults(cfg);
    loader L;
    memset(&L, 0, sizeof L);
    L.cfg = cfg;
    L.err = err;
    L.adam_w_mode = 1;
    int rc = 0;
    collect_replaced(&L, overrides, n_overrides);
    if (path) {
        cfg->source_path = zt_xstrdup(path);
        rc = load_file(&L, path);
    }
    for (int i = 0; rc == 0 && i < n_overrides; i++) rc = apply_override(&L, overrides[i]);
    if (rc == 0) rc = zt_config_cross_checks(&L);
    free(L.replaced.p);
    free(L.unread.p);
    if (rc != 0) {
        free(L.recs);
        zt_config_free(cfg);
        return -1;
    }
    cfg->set_at = L.recs;
    cfg->n_set_at = L.nrec;
    cfg->effective_text = zt_config_effective_text(cfg);
    return 0;
}
