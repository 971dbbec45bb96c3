/* config.c — see config.h. The file is read with libyaml's document API (nodes keep their marks,
 * so every error names FILE:LINE:COL); a static schema (keydef tables, one per mapping level)
 * drives both the file walk and `--set` overrides, so both get the same types, ranges and
 * near-miss suggestions. Cross-key checks run once, after all overrides, using the position where
 * each key was last set. */
#include "config/config.h"

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
/* schema                                                                                      */

enum {
    K_END = 0,
    K_SECTION, /* nested mapping: sub */
    K_INT,     /* int field */
    K_LONG,    /* long field */
    K_U64,     /* unsigned long long field */
    K_FLOAT,   /* float field */
    K_DOUBLE,  /* double field */
    K_BOOL,    /* int field, 0/1 */
    K_STR,     /* char * field, null or "" = NULL */
    K_ENUM,    /* int field from a name table */
    K_SPECIAL, /* handled by tag */
    K_NOTE,    /* DeepSpeed key without effect here: accepted, any value, one-line note */
    K_DSKEY,   /* DeepSpeed key zerotrain does not implement: error */
};

enum {
    T_NONE = 0,
    T_SCHED,          /* section: scheduler */
    T_ACT,            /* section: activation_checkpointing */
    T_ACT_ENABLED,    /* activation_checkpointing.enabled */
    T_TB,             /* train_batch_size: null = not given */
    T_MICRO,          /* train_micro_batch_size_per_gpu: records "given" */
    T_ACCUM,          /* gradient_accumulation_steps: records "given" */
    T_NULL_ZERO,      /* null means 0 (number_checkpoints) */
    T_ADAM_W_MODE,    /* bool kept by the loader for a cross-check */
    T_MUST_FALSE,     /* bool that must be false (unsupported DeepSpeed feature when true) */
    T_BETAS,          /* [b1, b2] */
    T_OPT_TYPE,       /* optimizer.type */
    T_SCHED_TYPE,     /* scheduler.type */
    T_RATIO,          /* offload ratio: [0,1] or "auto" */
    T_BYTES,          /* number of bytes or "40GiB" */
    T_RESUME,         /* auto | never | PATH */
    T_OFFLOAD_DEV,    /* offload_optimizer.device: none | cpu (nvme: not supported) */
    T_OFFLOAD_PARAM,  /* offload_param.device: none only */
    T_WANDB_ENABLED,  /* wandb.enabled: true gets a note (no network here) */
};

typedef struct enumval {
    const char *name;
    int value;
} enumval;

typedef struct keydef {
    const char *name;
    int kind;
    size_t off;                /* offsetof(zt_config, field); NOF = validate and discard */
    double lo, hi;             /* numeric range, inclusive (hi = HUGE_VAL: no upper bound) */
    int lo_excl;               /* lo itself is not allowed */
    int tag;                   /* T_* */
    const struct keydef *sub;  /* K_SECTION */
    const enumval *ev;         /* K_ENUM */
    const char *hint;          /* K_DSKEY: appended to the error */
} keydef;

#define NOF ((size_t)-1)
#define F(field) offsetof(zt_config, field)
#define INF HUGE_VAL
#define SEC(n, s, t) {n, K_SECTION, NOF, 0, 0, 0, t, s, NULL, NULL}
#define INT_(n, f, lo, hi) {n, K_INT, F(f), lo, hi, 0, T_NONE, NULL, NULL, NULL}
#define INTT(n, f, lo, hi, t) {n, K_INT, F(f), lo, hi, 0, t, NULL, NULL, NULL}
#define LONG_(n, f, lo, hi) {n, K_LONG, F(f), lo, hi, 0, T_NONE, NULL, NULL, NULL}
#define LONGT(n, f, lo, hi, t) {n, K_LONG, F(f), lo, hi, 0, t, NULL, NULL, NULL}
#define FLT(n, f, lo, hi) {n, K_FLOAT, F(f), lo, hi, 0, T_NONE, NULL, NULL, NULL}
#define FLTX(n, f, lo) {n, K_FLOAT, F(f), lo, INF, 1, T_NONE, NULL, NULL, NULL}
#define DBL(n, f, lo, hi) {n, K_DOUBLE, F(f), lo, hi, 0, T_NONE, NULL, NULL, NULL}
#define BOOL_(n, f) {n, K_BOOL, F(f), 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define BOOLT(n, f, t) {n, K_BOOL, F(f), 0, 0, 0, t, NULL, NULL, NULL}
#define BOOL_IGN(n) {n, K_BOOL, NOF, 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define BOOL_FALSE(n) {n, K_BOOL, NOF, 0, 0, 0, T_MUST_FALSE, NULL, NULL, NULL}
#define STR(n, f) {n, K_STR, F(f), 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define STR_IGN(n) {n, K_STR, NOF, 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define ENUM_(n, f, e) {n, K_ENUM, F(f), 0, 0, 0, T_NONE, NULL, e, NULL}
#define SPECIAL(n, t) {n, K_SPECIAL, NOF, 0, 0, 0, t, NULL, NULL, NULL}
#define NOTE(n) {n, K_NOTE, NOF, 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define DSKEY(n) {n, K_DSKEY, NOF, 0, 0, 0, T_NONE, NULL, NULL, NULL}
#define DSKEYH(n, h) {n, K_DSKEY, NOF, 0, 0, 0, T_NONE, NULL, NULL, h}
#define END {NULL, K_END, 0, 0, 0, 0, 0, NULL, NULL, NULL}

static const enumval warmup_types[] = {{"log", 1}, {"linear", 0}, {NULL, 0}};
static const enumval devices[] = {{"auto", ZT_DEVICE_AUTO}, {"cpu", ZT_DEVICE_CPU}, {"cuda", ZT_DEVICE_CUDA}, {NULL, 0}};
static const enumval sched_types[] = {{"WarmupLR", ZT_SCHED_WARMUP_LR},
                                      {"WarmupDecayLR", ZT_SCHED_WARMUP_DECAY_LR},
                                      {"WarmupCosineLR", ZT_SCHED_WARMUP_COSINE_LR},
                                      {NULL, 0}};
static const enumval opt_types[] = {{"AdamW", 0}, {"Adam", 1}, {NULL, 0}};
static const enumval offload_devs[] = {{"none", ZT_OFFLOAD_NONE}, {"cpu", ZT_OFFLOAD_CPU}, {NULL, 0}};
/* names DeepSpeed knows that we reject with "not supported" rather than "expected ..." */
static const char *const ds_optimizers[] = {"OneBitAdam", "ZeroOneAdam", "OneBitLamb", "Lamb", "Lion",
                                            "Adagrad", "MuAdam", "MuAdamW", "MuSGD", "CPUAdam", NULL};
static const char *const ds_schedulers[] = {"OneCycle", "LRRangeTest", NULL};

static const keydef model_keys[] = {
    INT_("n_layer", n_layer, 1, INF),       INT_("n_head", n_head, 1, INF),
    INT_("n_embd", n_embd, 1, INF),         INT_("vocab_size", vocab_size, 1, INF),
    INT_("n_positions", n_positions, 1, INF), STR("init_from", init_from),
    END};

static const keydef data_keys[] = {
    STR("train", train_glob), STR("val", val_glob), INT_("seq_len", seq_len, 1, INF), END};

static const keydef opt_param_keys[] = {
    FLT("lr", lr, 0, INF),
    SPECIAL("betas", T_BETAS),
    FLTX("eps", eps, 0),
    FLT("weight_decay", weight_decay, 0, INF),
    BOOL_("decay_all_params", decay_all_params),
    BOOL_IGN("torch_adam"),
    {"adam_w_mode", K_BOOL, NOF, 0, 0, 0, T_ADAM_W_MODE, NULL, NULL, NULL},
    DSKEY("amsgrad"),
    DSKEY("bias_correction"),
    END};

static const keydef opt_keys[] = {
    SPECIAL("type", T_OPT_TYPE), SEC("params", opt_param_keys, T_NONE), DSKEY("legacy_fusion"), END};

static const keydef sched_param_keys[] = {
    FLT("warmup_min_lr", warmup_min_lr, 0, INF),
    FLT("warmup_max_lr", warmup_max_lr, 0, INF),
    LONG_("warmup_num_steps", warmup_num_steps, 0, INF),
    ENUM_("warmup_type", warmup_type_log, warmup_types),
    LONG_("total_num_steps", total_num_steps, 0, INF),
    FLT("warmup_min_ratio", warmup_min_ratio, 0, 1),
    FLT("cos_min_ratio", cos_min_ratio, 0, 1),
    DSKEY("last_batch_iteration"),
    END};

static const keydef sched_keys[] = {
    SPECIAL("type", T_SCHED_TYPE), SEC("params", sched_param_keys, T_NONE), END};

static const keydef bf16_keys[] = {BOOL_("enabled", bf16_enabled), DSKEY("immediate_grad_update"), END};

static const keydef fp16_keys[] = {
    BOOL_("enabled", fp16_enabled),
    FLT("loss_scale", loss_scale, 0, INF),
    INT_("initial_scale_power", initial_scale_power, 0, 63),
    INT_("loss_scale_window", loss_scale_window, 1, INF),
    INT_("hysteresis", hysteresis, 1, INF),
    FLTX("min_loss_scale", min_loss_scale, 0),
    DSKEY("consecutive_hysteresis"),
    DSKEY("auto_cast"),
    DSKEY("fp16_master_weights_and_grads"),
    END};

static const keydef offload_opt_keys[] = {
    SPECIAL("device", T_OFFLOAD_DEV), SPECIAL("ratio", T_RATIO), BOOL_("pin_memory", offload_pin_memory),
    SPECIAL("device_memory", T_BYTES), DSKEY("nvme_path"), DSKEY("buffer_count"), DSKEY("pipeline_read"),
    DSKEY("pipeline_write"), DSKEY("pipeline"), DSKEY("fast_init"), END};

static const keydef offload_param_keys[] = {
    SPECIAL("device", T_OFFLOAD_PARAM), BOOL_IGN("pin_memory"), DSKEY("nvme_path"), DSKEY("buffer_count"),
    DSKEY("buffer_size"), DSKEY("max_in_cpu"), END};

static const keydef zero_keys[] = {
    INT_("stage", zero_stage, 0, 3),
    BOOL_("overlap_comm", overlap_comm),
    BOOL_("contiguous_gradients", contiguous_gradients),
    DBL("reduce_bucket_size", reduce_bucket_size, 1, INF),
    DBL("allgather_bucket_size", allgather_bucket_size, 1, INF),
    DBL("stage3_prefetch_bucket_size", stage3_prefetch_bucket_size, 0, INF),
    DBL("stage3_param_persistence_threshold", stage3_param_persistence_threshold, 0, INF),
    BOOL_IGN("reduce_scatter"),
    BOOL_IGN("allgather_partitions"),
    SEC("offload_optimizer", offload_opt_keys, T_NONE),
    SEC("offload_param", offload_param_keys, T_NONE),
    DSKEY("sub_group_size"), DSKEY("round_robin_gradients"), DSKEY("stage3_max_live_parameters"),
    DSKEY("stage3_max_reuse_distance"), DSKEY("stage3_gather_16bit_weights_on_model_save"),
    DSKEY("stage3_gather_fp16_weights_on_model_save"), DSKEY("ignore_unused_parameters"),
    DSKEY("load_from_fp32_weights"), DSKEY("elastic_checkpoint"), DSKEY("zero_hpz_partition_size"),
    DSKEY("zero_quantized_weights"), DSKEY("zero_quantized_nontrainable_weights"),
    DSKEY("zero_quantized_gradients"), DSKEY("mics_shard_size"), DSKEY("mics_hierarchical_params_gather"),
    DSKEY("memory_efficient_linear"), DSKEY("pipeline_loading_checkpoint"), DSKEY("override_module_apply"),
    DSKEY("cpu_offload"), DSKEY("cpu_offload_params"), DSKEY("cpu_offload_use_pin_memory"),
    DSKEY("stage3_module_granularity_threshold"), DSKEY("use_multi_rank_bucket_allreduce"),
    DSKEY("legacy_stage1"), DSKEY("log_trace_cache_warnings"), DSKEY("zeropp_loco_param"),
    DSKEY("use_all_reduce_for_fetch_params"),
    END};

static const keydef act_keys[] = {
    BOOLT("enabled", ckpt_enabled, T_ACT_ENABLED),
    BOOL_FALSE("partition_activations"),
    BOOL_FALSE("cpu_checkpointing"),
    BOOL_IGN("contiguous_memory_optimization"),
    INTT("number_checkpoints", ckpt_number_checkpoints, 0, INF, T_NULL_ZERO),
    BOOL_IGN("synchronize_checkpoint_boundary"),
    BOOL_IGN("profile"),
    END};

static const keydef ckpt_keys[] = {
    STR("dir", checkpoint_dir), LONG_("save_interval", save_interval, 0, INF), INT_("keep_last", keep_last, 0, INF),
    SPECIAL("resume", T_RESUME), DSKEY("tag_validation"), DSKEY("load_universal"), DSKEY("use_node_local_storage"),
    DSKEY("parallel_write"), END};

/* DeepSpeed's monitor sections (monitor.c writes them) */
static const keydef tensorboard_keys[] = {
    BOOL_("enabled", tensorboard.enabled), STR("output_path", tensorboard.output_path),
    STR("job_name", tensorboard.job_name), END};
static const keydef csv_monitor_keys[] = {
    BOOL_("enabled", csv_monitor.enabled), STR("output_path", csv_monitor.output_path),
    STR("job_name", csv_monitor.job_name), END};
static const keydef wandb_keys[] = {
    {"enabled", K_BOOL, NOF, 0, 0, 0, T_WANDB_ENABLED, NULL, NULL, NULL}, STR_IGN("group"), STR_IGN("team"),
    STR_IGN("project"), END};

static const keydef top_keys[] = {
    SEC("model", model_keys, T_NONE),
    SEC("data", data_keys, T_NONE),
    LONGT("train_batch_size", train_batch_size, 1, INF, T_TB),
    INTT("train_micro_batch_size_per_gpu", train_micro_batch_size_per_gpu, 1, INF, T_MICRO),
    INTT("gradient_accumulation_steps", gradient_accumulation_steps, 1, INF, T_ACCUM),
    LONG_("train_iters", train_iters, 1, INF),
    SEC("optimizer", opt_keys, T_NONE),
    SEC("scheduler", sched_keys, T_SCHED),
    FLT("gradient_clipping", gradient_clipping, 0, INF),
    SEC("bf16", bf16_keys, T_NONE),
    SEC("fp16", fp16_keys, T_NONE),
    SEC("zero_optimization", zero_keys, T_NONE),
    SEC("activation_checkpointing", act_keys, T_ACT),
    SEC("checkpoint", ckpt_keys, T_NONE),
    LONG_("steps_per_print", steps_per_print, 1, INF),
    LONG_("eval_interval", eval_interval, 0, INF),
    INT_("eval_batches", eval_batches, 1, INF),
    LONG_("sample_interval", sample_interval, 0, INF),
    INT_("sample_tokens", sample_tokens, 0, INF),
    STR("metrics_file", metrics_file),
    BOOL_("wall_clock_breakdown", wall_clock_breakdown),
    STR("trace", trace_file),
    SEC("tensorboard", tensorboard_keys, T_NONE),
    SEC("csv_monitor", csv_monitor_keys, T_NONE),
    SEC("wandb", wandb_keys, T_NONE),
    {"seed", K_U64, F(seed), 0, INF, 0, T_NONE, NULL, NULL, NULL},
    ENUM_("device", device, devices),
    DBL("comm_timeout", comm_timeout, 0, INF),
    /* accepted and ignored, with a note */
    NOTE("prescale_gradients"), NOTE("gradient_predivide_factor"), NOTE("zero_allow_untested_optimizer"),
    NOTE("communication_data_type"), NOTE("dump_state"), NOTE("flops_profiler"), NOTE("comms_logger"),
    /* DeepSpeed features zerotrain does not implement */
    DSKEY("amp"), DSKEYH("bfloat16", " (use bf16)"), DSKEY("sparse_attention"), DSKEY("pipeline"),
    DSKEY("data_efficiency"), DSKEY("curriculum_learning"), DSKEY("compression_training"), DSKEY("autotuning"),
    DSKEY("elasticity"), DSKEY("aio"), DSKEY("data_types"), DSKEY("memory_breakdown"), DSKEY("eigenvalue"),
    DSKEY("progressive_layer_drop"), DSKEY("quantize_training"), DSKEY("nebula"), DSKEY("hybrid_engine"),
    DSKEY("sparse_gradients"), DSKEY("disable_allgather"), DSKEY("fp32_allreduce"),
    DSKEY("zero_force_ds_cpu_optimizer"), DSKEY("load_universal_checkpoint"), DSKEY("use_node_local_storage"),
    DSKEY("graph_harvesting"), DSKEY("compile"), DSKEY("weight_quantization"), DSKEY("dataloader_drop_last"),
    DSKEY("seq_parallel_communication_data_type"), DSKEY("timers"), DSKEY("tensor_parallel"),
    END};

/* parameters each scheduler type takes (DeepSpeed's names) */
static const char *const sched_params_warmup[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                  "warmup_type", NULL};
static const char *const sched_params_decay[] = {"warmup_min_lr", "warmup_max_lr", "warmup_num_steps",
                                                 "warmup_type", "total_num_steps", NULL};
static const char *const sched_params_cosine[] = {"total_num_steps", "warmup_min_ratio", "warmup_num_steps",
                                                  "cos_min_ratio", "warmup_type", NULL};

static const char *const *sched_params_of(int type) {
    switch (type) {
    case ZT_SCHED_WARMUP_LR: return sched_params_warmup;
    case ZT_SCHED_WARMUP_DECAY_LR: return sched_params_decay;
    case ZT_SCHED_WARMUP_COSINE_LR: return sched_params_cosine;
    default: return NULL;
    }
}

static const char *enum_name(const enumval *ev, int value) {
    for (; ev->name; ev++)
        if (ev->value == value) return ev->name;
    return "?";
}

/* ------------------------------------------------------------------------------------------ */
/* small helpers                                                                               */

typedef struct sbuf {
    char *p;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        size_t room = b->cap - b->n;
        int k = vsnprintf(b->p ? b->p + b->n : NULL, b->p ? room : 0, fmt, ap);
        va_end(ap);
        if (k < 0) return;
        if (b->p && (size_t)k < room) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->n + (size_t)k + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            fprintf(stderr, "zerotrain: error: out of host memory\n");
            abort();
        }
        b->p = np;
        b->cap = cap;
    }
}

static int levenshtein(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000;
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = tolower((unsigned char)a[i - 1]) != tolower((unsigned char)b[j - 1]);
            int best = diag + cost;
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

/* Writes " (did you mean 'X'?)" into out when one candidate is close enough, else "". */
static void suggest(const char *word, const char *const *cands, int n, char *out, size_t cap) {
    int limit = (int)strlen(word) / 3;
    if (limit < 2) limit = 2;
    int best = limit + 1;
    const char *pick = NULL;
    for (int i = 0; i < n; i++) {
        int d = levenshtein(word, cands[i]);
        if (d < best) best = d, pick = cands[i];
    }
    if (pick) snprintf(out, cap, " (did you mean '%s'?)", pick);
    else out[0] = '\0';
}

static void suggest_key(const char *word, const keydef *defs, char *out, size_t cap) {
    const char *cands[128];
    int n = 0;
    for (const keydef *d = defs; d->name && n < 128; d++)
        if (d->kind != K_DSKEY) cands[n++] = d->name;
    suggest(word, cands, n, out, cap);
}

static void suggest_enum(const char *word, const enumval *ev, char *out, size_t cap) {
    const char *cands[16];
    int n = 0;
    for (; ev->name && n < 16; ev++) cands[n++] = ev->name;
    suggest(word, cands, n, out, cap);
}

/* "a, b or c" */
static void enum_list(const enumval *ev, char *out, size_t cap) {
    int n = 0;
    while (ev[n].name) n++;
    out[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t len = strlen(out);
        snprintf(out + len, cap - len, "%s%s", i == 0 ? "" : (i == n - 1 ? " or " : ", "), ev[i].name);
    }
}

static const keydef *find_key(const keydef *defs, const char *name) {
    for (const keydef *d = defs; d->name; d++)
        if (!strcmp(d->name, name)) return d;
    return NULL;
}

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
static void range_desc(const keydef *d, int integer, double cap_hi, char *out, size_t cap) {
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

typedef struct posrec {
    char path[96];
    char where[400]; /* "FILE:L:C: path" or "--set KEY[: path]" */
} posrec;

typedef struct loader {
    zt_config *cfg;
    zt_err *err;
    const char *file;  /* file being read (NULL while applying overrides) */
    const char *ov;    /* the override key being applied */
    posrec *recs;
    int nrec, caprec;
    int sched_seen, sched_type_given;
    int act_seen, act_enabled_given;
    int adam_w_mode;
} loader;

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

static void record(loader *L, const char *path, const yaml_node_t *n) {
    if (L->nrec == L->caprec) {
        L->caprec = L->caprec ? 2 * L->caprec : 64;
        posrec *nr = realloc(L->recs, (size_t)L->caprec * sizeof *nr);
        if (!nr) {
            fprintf(stderr, "zerotrain: error: out of host memory\n");
            abort();
        }
        L->recs = nr;
    }
    posrec *r = &L->recs[L->nrec++];
    snprintf(r->path, sizeof r->path, "%s", path);
    where_of(L, n, path, r->where, sizeof r->where);
}

/* index of the latest record of path, -1 if never set */
static int rec_index(const loader *L, const char *path) {
    for (int i = L->nrec - 1; i >= 0; i--)
        if (!strcmp(L->recs[i].path, path)) return i;
    return -1;
}

/* Cross-key error at where `path` was last set. */
static int fail_rec(const loader *L, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail_rec(const loader *L, const char *path, const char *fmt, ...) {
    char m[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(m, sizeof m, fmt, ap);
    va_end(ap);
    int i = rec_index(L, path);
    if (i >= 0) return zt_fail(L->err, "%s: %s", L->recs[i].where, m);
    return zt_fail(L->err, "%s: %s: %s", L->cfg->source_path ? L->cfg->source_path : "config", path, m);
}

static void *field(zt_config *cfg, const keydef *d) { return (char *)cfg + d->off; }

static void set_str(char **slot, const char *text) {
    free(*slot);
    *slot = (text && *text) ? zt_xstrdup(text) : NULL;
}

/* Reads an integer into *out, with the range of d capped at cap_hi. */
static int get_integer(const loader *L, const keydef *d, const char *path, const yaml_node_t *v, double cap_hi,
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

static int get_number(const loader *L, const keydef *d, const char *path, const yaml_node_t *v, double *out) {
    scalar s;
    classify(v, &s);
    char want[160], got[96];
    range_desc(d, 0, INF, want, sizeof want);
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

static int get_enum(const loader *L, const char *path, const yaml_node_t *v, const enumval *ev, int *out) {
    char list[160];
    enum_list(ev, list, sizeof list);
    const char *t;
    if (get_text(L, path, v, list, &t)) return -1;
    for (const enumval *e = ev; e->name; e++)
        if (!strcasecmp(e->name, t)) {
            *out = e->value;
            return 0;
        }
    char got[96], sug[96];
    describe(v, got, sizeof got);
    suggest_enum(t, ev, sug, sizeof sug);
    return fail_at(L, v, path, "expected %s, got %s%s", list, got, sug);
}

/* "40GiB", "1.5e9", "512 MB" -> bytes */
static int parse_bytes(const char *t, double *out) {
    while (isspace((unsigned char)*t)) t++;
    if (!isdigit((unsigned char)*t) && *t != '.') return -1;
    char *end;
    double v = strtod(t, &end);
    if (end == t || !isfinite(v) || v < 0) return -1;
    while (isspace((unsigned char)*end)) end++;
    static const struct { const char *unit; double mult; } units[] = {
        {"", 1}, {"b", 1}, {"kb", 1e3}, {"kib", 1024.0}, {"mb", 1e6}, {"mib", 1048576.0}, {"gb", 1e9},
        {"gib", 1073741824.0}, {"tb", 1e12}, {"tib", 1099511627776.0}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
        if (!strcasecmp(end, units[i].unit)) {
            *out = v * units[i].mult;
            return 0;
        }
    return -1;
}

static int in_list(const char *t, const char *const *list) {
    for (; *list; list++)
        if (!strcasecmp(*list, t)) return 1;
    return 0;
}

static int apply_map(loader *L, const keydef *defs, const char *path, const yaml_document_t *doc,
                     const yaml_node_t *map, int tag);

static int apply_special(loader *L, const keydef *d, const char *path, const yaml_document_t *doc,
                         const yaml_node_t *v) {
    zt_config *cfg = L->cfg;
    char got[96];
    describe(v, got, sizeof got);
    switch (d->tag) {
    case T_BETAS: {
        if (!v || v->type != YAML_SEQUENCE_NODE ||
            v->data.sequence.items.top - v->data.sequence.items.start != 2)
            return fail_at(L, v, path, "expected a list of two numbers [beta1, beta2], got %s", got);
        float b[2];
        for (int i = 0; i < 2; i++) {
            const yaml_node_t *e = yaml_document_get_node((yaml_document_t *)doc, v->data.sequence.items.start[i]);
            scalar s;
            classify(e, &s);
            if (s.cls != C_NUM || !(s.d >= 0 && s.d < 1)) {
                char eg[96];
                describe(e, eg, sizeof eg);
                return fail_at(L, e, path, "beta%d: expected a number in [0, 1), got %s", i + 1, eg);
            }
            b[i] = strtof(s.text, NULL);
        }
        cfg->beta1 = b[0];
        cfg->beta2 = b[1];
        return 0;
    }
    case T_OPT_TYPE: {
        const char *t;
        if (get_text(L, path, v, "AdamW or Adam", &t)) return -1;
        if (in_list(t, ds_optimizers))
            return fail_at(L, v, path, "%s is a DeepSpeed optimizer zerotrain does not support (expected AdamW or Adam)",
                           t);
        int which;
        if (get_enum(L, path, v, opt_types, &which)) return -1;
        set_str(&cfg->optimizer_type, enum_name(opt_types, which));
        return 0;
    }
    case T_SCHED_TYPE: {
        const char *t;
        if (get_text(L, path, v, "WarmupLR, WarmupDecayLR or WarmupCosineLR", &t)) return -1;
        if (in_list(t, ds_schedulers))
            return fail_at(L, v, path,
                           "%s is a DeepSpeed scheduler zerotrain does not support (expected WarmupLR, "
                           "WarmupDecayLR or WarmupCosineLR)", t);
        int which;
        if (get_enum(L, path, v, sched_types, &which)) return -1;
        cfg->scheduler = which;
        L->sched_type_given = 1;
        L->sched_seen = 1;
        return 0;
    }
    case T_RATIO: {
        scalar s;
        classify(v, &s);
        if (s.cls == C_STR && !strcasecmp(s.text, "auto")) {
            cfg->offload_ratio = -1.0;
            return 0;
        }
        if (s.cls != C_NUM || !(s.d >= 0 && s.d <= 1))
            return fail_at(L, v, path, "expected a number in [0, 1] or \"auto\", got %s", got);
        cfg->offload_ratio = s.d;
        return 0;
    }
    case T_BYTES: {
        scalar s;
        classify(v, &s);
        double bytes;
        if ((s.cls == C_NUM && s.d >= 0 && isfinite(s.d) && (bytes = s.d, 1)) ||
            (s.cls == C_STR && parse_bytes(s.text, &bytes) == 0)) {
            cfg->offload_device_memory = floor(bytes);
            return 0;
        }
        return fail_at(L, v, path, "expected a byte count >= 0 (a number or a string like \"40GiB\"), got %s", got);
    }
    case T_RESUME: {
        const char *t;
        if (get_text(L, path, v, "auto, never or a checkpoint path", &t)) return -1;
        free(cfg->resume_path);
        cfg->resume_path = NULL;
        if (!strcmp(t, "auto")) cfg->resume_mode = ZT_RESUME_AUTO;
        else if (!strcmp(t, "never")) cfg->resume_mode = ZT_RESUME_NEVER;
        else {
            cfg->resume_mode = ZT_RESUME_PATH;
            cfg->resume_path = zt_xstrdup(t);
        }
        return 0;
    }
    case T_OFFLOAD_DEV: {
        const char *t;
        if (get_text(L, path, v, "none or cpu", &t)) return -1;
        if (!strcasecmp(t, "nvme"))
            return fail_at(L, v, path, "nvme offload is not supported by zerotrain (expected none or cpu)");
        int which;
        if (get_enum(L, path, v, offload_devs, &which)) return -1;
        cfg->offload_device = which;
        return 0;
    }
    case T_OFFLOAD_PARAM: {
        const char *t;
        if (get_text(L, path, v, "none", &t)) return -1;
        if (!strcasecmp(t, "none")) return 0;
        if (!strcasecmp(t, "cpu") || !strcasecmp(t, "nvme"))
            return fail_at(L, v, path,
                           "parameter offload to %s is not supported by zerotrain (only device none; "
                           "use zero_optimization.offload_optimizer to offload optimizer state)", t);
        return fail_at(L, v, path, "expected none, got %s", got);
    }
    default: break;
    }
    return fail_at(L, v, path, "internal error: unhandled key");
}

static int apply_key(loader *L, const keydef *d, const char *path, const yaml_document_t *doc,
                     const yaml_node_t *key, const yaml_node_t *v) {
    zt_config *cfg = L->cfg;
    const yaml_node_t *at_key = key ? key : v;
    switch (d->kind) {
    case K_NOTE: {
        char w[512];
        where_of(L, at_key, NULL, w, sizeof w);
        zt_info("%s: note: ignoring DeepSpeed key '%s' (it has no effect in zerotrain)", w, path);
        return 0;
    }
    case K_DSKEY: return fail_at(L, at_key, NULL, "%s is a DeepSpeed key zerotrain does not support%s", path,
                                 d->hint ? d->hint : "");
    case K_SECTION: return apply_map(L, d->sub, path, doc, v, d->tag);
    default: break;
    }
    record(L, path, v);
    scalar s;
    classify(v, &s);

    /* null for "not given" style keys */
    if (s.cls == C_NULL) {
        switch (d->tag) {
        case T_TB: cfg->train_batch_size = 0; return 0;
        case T_MICRO: cfg->train_micro_batch_size_per_gpu = 4; cfg->micro_batch_given = 0; return 0;
        case T_ACCUM: cfg->gradient_accumulation_steps = 1; cfg->grad_accum_given = 0; return 0;
        case T_NULL_ZERO: *(int *)field(cfg, d) = 0; return 0;
        default: break;
        }
    }

    switch (d->kind) {
    case K_INT: {
        long long x;
        if (get_integer(L, d, path, v, (double)INT_MAX, &x)) return -1;
        *(int *)field(cfg, d) = (int)x;
        if (d->tag == T_MICRO) cfg->micro_batch_given = 1;
        if (d->tag == T_ACCUM) cfg->grad_accum_given = 1;
        return 0;
    }
    case K_LONG: {
        long long x;
        if (get_integer(L, d, path, v, (double)LONG_MAX, &x)) return -1;
        *(long *)field(cfg, d) = (long)x;
        return 0;
    }
    case K_U64: {
        char got[96];
        describe(v, got, sizeof got);
        if (s.cls != C_NUM || s.form != 1 || s.text[0] == '-')
            return fail_at(L, v, path, "expected an integer >= 0, got %s", got);
        errno = 0;
        unsigned long long x = strtoull(s.text, NULL, 10);
        if (errno == ERANGE) return fail_at(L, v, path, "expected an integer in [0, 2^64), got %s", got);
        *(unsigned long long *)field(cfg, d) = x;
        return 0;
    }
    case K_FLOAT: {
        double x;
        if (get_number(L, d, path, v, &x)) return -1;
        float f = strtof(s.text, NULL);
        if (!isfinite(f)) {
            char got[96];
            describe(v, got, sizeof got);
            return fail_at(L, v, path, "expected a number within single-precision range, got %s", got);
        }
        *(float *)field(cfg, d) = f;
        return 0;
    }
    case K_DOUBLE: {
        double x;
        if (get_number(L, d, path, v, &x)) return -1;
        *(double *)field(cfg, d) = x;
        return 0;
    }
    case K_BOOL: {
        int b = 0;
        if (get_bool(L, path, v, &b)) return -1;
        if (d->tag == T_MUST_FALSE && b)
            return fail_at(L, v, path, "true is not supported by zerotrain (only false)");
        if (d->tag == T_ADAM_W_MODE) L->adam_w_mode = b;
        if (d->tag == T_ACT_ENABLED) L->act_enabled_given = 1;
        if (d->tag == T_WANDB_ENABLED && b) {
            char w[512];
            where_of(L, v, NULL, w, sizeof w);
            zt_info("%s: note: wandb is not supported (no network for it here); use tensorboard or csv_monitor", w);
        }
        if (d->off != NOF) *(int *)field(cfg, d) = b;
        return 0;
    }
    case K_STR: {
        if (s.cls == C_NULL) {
            if (d->off != NOF) set_str((char **)field(cfg, d), NULL);
            return 0;
        }
        const char *t;
        if (get_text(L, path, v, "a string", &t)) return -1;
        if (d->off != NOF) set_str((char **)field(cfg, d), t);
        return 0;
    }
    case K_ENUM: {
        int x;
        if (get_enum(L, path, v, d->ev, &x)) return -1;
        *(int *)field(cfg, d) = x;
        return 0;
    }
    case K_SPECIAL: return apply_special(L, d, path, doc, v);
    default: break;
    }
    return fail_at(L, v, path, "internal error: unhandled key kind");
}

static void join_path(char *out, size_t cap, const char *base, const char *name) {
    if (base && *base) snprintf(out, cap, "%s.%s", base, name);
    else snprintf(out, cap, "%s", name);
}

static int apply_map(loader *L, const keydef *defs, const char *path, const yaml_document_t *doc,
                     const yaml_node_t *map, int tag) {
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
        record(L, "scheduler", map);
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
        const keydef *d = find_key(defs, name);
        if (!d) {
            char sug[128];
            suggest_key(name, defs, sug, sizeof sug);
            return fail_at(L, k, NULL, "unknown key '%.80s'%s%s%s", name, *path ? " in " : "", path, sug);
        }
        if (tag == T_ACT) L->act_seen = 1;
        char child[256];
        join_path(child, sizeof child, path, name);
        if (apply_key(L, d, child, doc, k, v)) return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* reading YAML                                                                                */

static int yaml_problem(const char *where, const yaml_parser_t *p, zt_err *err) {
    const char *problem = p->problem ? p->problem : "cannot parse";
    if (p->error == YAML_READER_ERROR)
        return zt_fail(err, "%s: byte %zu: %s", where, p->problem_offset, problem);
    if (p->context)
        return zt_fail(err, "%s:%zu:%zu: %s (%s that starts at %zu:%zu)", where, p->problem_mark.line + 1,
                       p->problem_mark.column + 1, problem, p->context, p->context_mark.line + 1,
                       p->context_mark.column + 1);
    return zt_fail(err, "%s:%zu:%zu: %s", where, p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

static int load_file(loader *L, const char *path) {
    size_t len;
    char *text = zt_read_file(path, &len, L->err);
    if (!text) return -1;
    yaml_parser_t parser;
    yaml_document_t doc, extra;
    if (!yaml_parser_initialize(&parser)) {
        free(text);
        return zt_fail(L->err, "%s: cannot initialise the YAML parser", path);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, &doc)) {
        rc = yaml_problem(path, &parser, L->err);
    } else {
        const yaml_node_t *root = yaml_document_get_root_node(&doc);
        if (root) {
            if (!yaml_parser_load(&parser, &extra)) {
                rc = yaml_problem(path, &parser, L->err);
            } else {
                const yaml_node_t *r2 = yaml_document_get_root_node(&extra);
                if (r2)
                    rc = zt_fail(L->err, "%s:%zu:%zu: expected one YAML document, found a second one", path,
                                 r2->start_mark.line + 1, r2->start_mark.column + 1);
                yaml_document_delete(&extra);
            }
            if (rc == 0) {
                L->file = path;
                rc = apply_map(L, top_keys, "", &doc, root, T_NONE);
                L->file = NULL;
            }
        }
        yaml_document_delete(&doc);
    }
    yaml_parser_delete(&parser);
    free(text);
    return rc;
}

static int apply_override(loader *L, const char *spec) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) return zt_fail(L->err, "--set %s: expected KEY=VALUE (e.g. optimizer.params.lr=3e-4)", spec);
    char key[256];
    size_t klen = (size_t)(eq - spec);
    while (klen > 0 && isspace((unsigned char)spec[klen - 1])) klen--;
    if (klen >= sizeof key) return zt_fail(L->err, "--set: key too long");
    memcpy(key, spec, klen);
    key[klen] = '\0';
    const char *value = eq + 1;

    yaml_document_t doc;
    int have_doc = 0;
    {
        yaml_parser_t parser;
        yaml_parser_initialize(&parser);
        yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
        if (yaml_parser_load(&parser, &doc)) {
            have_doc = 1;
        } else if (value[0] == '[' || value[0] == '{') {
            int rc = zt_fail(L->err, "--set %s: cannot parse value '%s': %s", key, value,
                             parser.problem ? parser.problem : "syntax error");
            yaml_parser_delete(&parser);
            return rc;
        }
        yaml_parser_delete(&parser);
    }
    if (!have_doc || !yaml_document_get_root_node(&doc)) {
        /* empty value -> null; text YAML cannot read (e.g. "*.bin") -> a plain string */
        if (have_doc) yaml_document_delete(&doc);
        if (!yaml_document_initialize(&doc, NULL, NULL, NULL, 1, 1)) return zt_fail(L->err, "--set: out of memory");
        int empty = !have_doc ? 0 : 1;
        const char *txt = empty ? "null" : value;
        yaml_document_add_scalar(&doc, NULL, (yaml_char_t *)txt, (int)strlen(txt),
                                 empty ? YAML_PLAIN_SCALAR_STYLE : YAML_SINGLE_QUOTED_SCALAR_STYLE);
    }
    const yaml_node_t *root = yaml_document_get_root_node(&doc);

    L->ov = key;
    int rc = 0;
    const keydef *defs = top_keys, *d = NULL;
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
        d = find_key(defs, comp);
        if (!d) {
            char sug[128];
            suggest_key(comp, defs, sug, sizeof sug);
            rc = zt_fail(L->err, "--set %s: unknown key '%s'%s%s%s", key, comp, *sofar ? " in " : "", sofar, sug);
            break;
        }
        char next[256];
        join_path(next, sizeof next, sofar, comp);
        snprintf(sofar, sizeof sofar, "%s", next);
        if (!dot) {
            rc = apply_key(L, d, sofar, &doc, NULL, root);
            break;
        }
        if (d->kind == K_NOTE || d->kind == K_DSKEY) {
            rc = apply_key(L, d, sofar, &doc, NULL, root);
            break;
        }
        if (d->kind != K_SECTION) {
            rc = zt_fail(L->err, "--set %s: %s is a value, not a section", key, sofar);
            break;
        }
        if (d->tag == T_SCHED) {
            L->sched_seen = 1;
            record(L, "scheduler", root);
        }
        if (d->tag == T_ACT && strcmp(dot + 1, "enabled") != 0) L->act_seen = 1;
        defs = d->sub;
        p = dot + 1;
    }
    L->ov = NULL;
    yaml_document_delete(&doc);
    return rc;
}

/* ------------------------------------------------------------------------------------------ */
/* cross-key checks                                                                            */

/* whichever of a, b was set last (NULL if neither) */
static const char *latest(const loader *L, const char *a, const char *b) {
    int ia = rec_index(L, a), ib = rec_index(L, b);
    if (ia < 0 && ib < 0) return NULL;
    return ia > ib ? a : b;
}

static int finish(loader *L) {
    zt_config *c = L->cfg;

    if (L->sched_seen && !L->sched_type_given)
        return fail_rec(L, "scheduler", "type is required (WarmupLR, WarmupDecayLR or WarmupCosineLR)");
    if (c->scheduler != ZT_SCHED_CONSTANT) {
        const char *const *ok = sched_params_of(c->scheduler);
        const char *pre = "scheduler.params.";
        for (int i = 0; i < L->nrec; i++) {
            if (strncmp(L->recs[i].path, pre, strlen(pre)) != 0) continue;
            const char *name = L->recs[i].path + strlen(pre);
            int found = 0;
            for (int j = 0; ok[j]; j++) found |= !strcmp(ok[j], name);
            if (!found) {
                char list[256] = "";
                for (int j = 0; ok[j]; j++) {
                    size_t len = strlen(list);
                    snprintf(list + len, sizeof list - len, "%s%s", j ? ", " : "", ok[j]);
                }
                return zt_fail(L->err, "%s: not a parameter of %s (it takes %s)", L->recs[i].where,
                               enum_name(sched_types, c->scheduler), list);
            }
        }
        if (c->warmup_max_lr < 0) c->warmup_max_lr = c->lr;
    }

    if (L->act_seen && !L->act_enabled_given) c->ckpt_enabled = 1;

    if (c->n_embd % c->n_head != 0) {
        const char *k = latest(L, "model.n_embd", "model.n_head");
        if (k && !strcmp(k, "model.n_head"))
            return fail_rec(L, k, "expected a divisor of model.n_embd (%d), got %d", c->n_embd, c->n_head);
        return fail_rec(L, "model.n_embd", "expected a multiple of model.n_head (%d), got %d", c->n_head, c->n_embd);
    }
    if (c->seq_len > c->n_positions) {
        const char *k = latest(L, "data.seq_len", "model.n_positions");
        if (k && !strcmp(k, "model.n_positions"))
            return fail_rec(L, k, "expected >= data.seq_len (%d), got %d", c->seq_len, c->n_positions);
        return fail_rec(L, "data.seq_len", "expected <= model.n_positions (%d), got %d", c->n_positions, c->seq_len);
    }
    if (c->ckpt_number_checkpoints > c->n_layer) {
        const char *k = latest(L, "activation_checkpointing.number_checkpoints", "model.n_layer");
        if (k && !strcmp(k, "model.n_layer"))
            return fail_rec(L, k, "expected >= activation_checkpointing.number_checkpoints (%d), got %d",
                            c->ckpt_number_checkpoints, c->n_layer);
        return fail_rec(L, "activation_checkpointing.number_checkpoints",
                        "expected an integer in [0, model.n_layer = %d], got %d", c->n_layer,
                        c->ckpt_number_checkpoints);
    }
    if (c->bf16_enabled && c->fp16_enabled) {
        const char *k = latest(L, "bf16.enabled", "fp16.enabled");
        return fail_rec(L, k ? k : "fp16.enabled", "bf16 and fp16 cannot both be enabled");
    }
    if (!L->adam_w_mode && c->weight_decay > 0 && !strcmp(c->optimizer_type, "Adam")) {
        const char *k = latest(L, "optimizer.params.adam_w_mode", "optimizer.params.weight_decay");
        return fail_rec(L, k ? k : "optimizer.params.adam_w_mode",
                        "adam_w_mode false with weight_decay %g asks for L2-coupled Adam, which zerotrain does "
                        "not support (use adam_w_mode true or type AdamW for decoupled weight decay, or "
                        "weight_decay 0)", (double)c->weight_decay);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* effective text                                                                              */

static void put_float(sbuf *b, float v) {
    char buf[48];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    sb_printf(b, "%s", buf);
}

static void put_double(sbuf *b, double v) {
    char buf[48];
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(buf, sizeof buf, "%.0f", v);
    } else {
        for (int p = 1; p <= 17; p++) {
            snprintf(buf, sizeof buf, "%.*g", p, v);
            if (strtod(buf, NULL) == v) break;
        }
    }
    sb_printf(b, "%s", buf);
}

static void put_str(sbuf *b, const char *s) {
    if (!s) {
        sb_printf(b, "null");
        return;
    }
    sb_printf(b, "\"");
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') sb_printf(b, "\\%c", *p);
        else if (*p == '\n') sb_printf(b, "\\n");
        else if (*p == '\t') sb_printf(b, "\\t");
        else if (*p < 0x20 || *p == 0x7f) sb_printf(b, "\\x%02x", *p);
        else sb_printf(b, "%c", *p);
    }
    sb_printf(b, "\"");
}

static const char *tf(int b) { return b ? "true" : "false"; }

static char *effective_text(const zt_config *c) {
    sbuf b = {0};
    if (c->source_path) sb_printf(&b, "# zerotrain effective config (from %s)\n", c->source_path);
    else sb_printf(&b, "# zerotrain effective config\n");
    sb_printf(&b, "model:\n  n_layer: %d\n  n_head: %d\n  n_embd: %d\n  vocab_size: %d\n  n_positions: %d\n",
              c->n_layer, c->n_head, c->n_embd, c->vocab_size, c->n_positions);
    sb_printf(&b, "  init_from: "); put_str(&b, c->init_from);
    sb_printf(&b, "\ndata:\n  train: "); put_str(&b, c->train_glob);
    sb_printf(&b, "\n  val: "); put_str(&b, c->val_glob);
    sb_printf(&b, "\n  seq_len: %d\n", c->seq_len);
    if (c->train_batch_size > 0) sb_printf(&b, "train_batch_size: %ld\n", c->train_batch_size);
    else sb_printf(&b, "train_batch_size: null\n");
    /* when train_batch_size is given, an unset micro/accumulation stays unset (it is derived) */
    if (c->micro_batch_given || c->train_batch_size <= 0)
        sb_printf(&b, "train_micro_batch_size_per_gpu: %d\n", c->train_micro_batch_size_per_gpu);
    else sb_printf(&b, "train_micro_batch_size_per_gpu: null\n");
    if (c->grad_accum_given || c->train_batch_size <= 0)
        sb_printf(&b, "gradient_accumulation_steps: %d\n", c->gradient_accumulation_steps);
    else sb_printf(&b, "gradient_accumulation_steps: null\n");
    sb_printf(&b, "train_iters: %ld\n", c->train_iters);
    sb_printf(&b, "optimizer:\n  type: %s\n  params:\n    lr: ", c->optimizer_type);
    put_float(&b, c->lr);
    sb_printf(&b, "\n    betas: ["); put_float(&b, c->beta1);
    sb_printf(&b, ", "); put_float(&b, c->beta2);
    sb_printf(&b, "]\n    eps: "); put_float(&b, c->eps);
    sb_printf(&b, "\n    weight_decay: "); put_float(&b, c->weight_decay);
    sb_printf(&b, "\n    decay_all_params: %s\n", tf(c->decay_all_params));
    if (c->scheduler == ZT_SCHED_CONSTANT) {
        sb_printf(&b, "# scheduler: none (constant lr)\n");
    } else {
        sb_printf(&b, "scheduler:\n  type: %s\n  params:\n", enum_name(sched_types, c->scheduler));
        for (const char *const *p = sched_params_of(c->scheduler); *p; p++) {
            sb_printf(&b, "    %s: ", *p);
            if (!strcmp(*p, "warmup_min_lr")) put_float(&b, c->warmup_min_lr);
            else if (!strcmp(*p, "warmup_max_lr")) put_float(&b, c->warmup_max_lr);
            else if (!strcmp(*p, "warmup_num_steps")) sb_printf(&b, "%ld", c->warmup_num_steps);
            else if (!strcmp(*p, "warmup_type")) sb_printf(&b, "%s", c->warmup_type_log ? "log" : "linear");
            else if (!strcmp(*p, "total_num_steps")) sb_printf(&b, "%ld", c->total_num_steps);
            else if (!strcmp(*p, "warmup_min_ratio")) put_float(&b, c->warmup_min_ratio);
            else if (!strcmp(*p, "cos_min_ratio")) put_float(&b, c->cos_min_ratio);
            sb_printf(&b, "\n");
        }
    }
    sb_printf(&b, "gradient_clipping: "); put_float(&b, c->gradient_clipping);
    sb_printf(&b, "\nbf16:\n  enabled: %s\n", tf(c->bf16_enabled));
    sb_printf(&b, "fp16:\n  enabled: %s\n  loss_scale: ", tf(c->fp16_enabled));
    put_float(&b, c->loss_scale);
    sb_printf(&b, "\n  initial_scale_power: %d\n  loss_scale_window: %d\n  hysteresis: %d\n  min_loss_scale: ",
              c->initial_scale_power, c->loss_scale_window, c->hysteresis);
    put_float(&b, c->min_loss_scale);
    sb_printf(&b, "\nzero_optimization:\n  stage: %d\n  overlap_comm: %s\n  contiguous_gradients: %s\n",
              c->zero_stage, tf(c->overlap_comm), tf(c->contiguous_gradients));
    sb_printf(&b, "  reduce_bucket_size: "); put_double(&b, c->reduce_bucket_size);
    sb_printf(&b, "\n  allgather_bucket_size: "); put_double(&b, c->allgather_bucket_size);
    sb_printf(&b, "\n  stage3_prefetch_bucket_size: "); put_double(&b, c->stage3_prefetch_bucket_size);
    sb_printf(&b, "\n  stage3_param_persistence_threshold: "); put_double(&b, c->stage3_param_persistence_threshold);
    sb_printf(&b, "\n  offload_optimizer:\n    device: %s\n    ratio: ", enum_name(offload_devs, c->offload_device));
    if (c->offload_ratio < 0) sb_printf(&b, "auto");
    else put_double(&b, c->offload_ratio);
    sb_printf(&b, "\n    pin_memory: %s\n    device_memory: ", tf(c->offload_pin_memory));
    put_double(&b, c->offload_device_memory);
    sb_printf(&b, "\nactivation_checkpointing:\n  enabled: %s\n  number_checkpoints: %d\n", tf(c->ckpt_enabled),
              c->ckpt_number_checkpoints);
    sb_printf(&b, "checkpoint:\n  dir: "); put_str(&b, c->checkpoint_dir);
    sb_printf(&b, "\n  save_interval: %ld\n  keep_last: %d\n  resume: ", c->save_interval, c->keep_last);
    if (c->resume_mode == ZT_RESUME_PATH) put_str(&b, c->resume_path);
    else sb_printf(&b, "%s", c->resume_mode == ZT_RESUME_NEVER ? "never" : "auto");
    sb_printf(&b, "\nsteps_per_print: %ld\neval_interval: %ld\neval_batches: %d\nsample_interval: %ld\n"
                  "sample_tokens: %d\nmetrics_file: ",
              c->steps_per_print, c->eval_interval, c->eval_batches, c->sample_interval, c->sample_tokens);
    put_str(&b, c->metrics_file);
    sb_printf(&b, "\nwall_clock_breakdown: %s\ntrace: ", tf(c->wall_clock_breakdown));
    put_str(&b, c->trace_file);
    const zt_monitor_config *mons[] = {&c->tensorboard, &c->csv_monitor};
    const char *mon_names[] = {"tensorboard", "csv_monitor"};
    for (int i = 0; i < 2; i++) {
        sb_printf(&b, "\n%s:\n  enabled: %s\n  output_path: ", mon_names[i], tf(mons[i]->enabled));
        put_str(&b, mons[i]->output_path);
        sb_printf(&b, "\n  job_name: ");
        put_str(&b, mons[i]->job_name);
    }
    sb_printf(&b, "\nseed: %llu\ndevice: %s\n", c->seed, enum_name(devices, c->device));
    sb_printf(&b, "comm_timeout: "); put_double(&b, c->comm_timeout); sb_printf(&b, "\n");
    return b.p;
}

/* ------------------------------------------------------------------------------------------ */
/* public API                                                                                  */

void zt_config_defaults(zt_config *c) {
    memset(c, 0, sizeof *c);
    c->n_layer = 12;
    c->n_head = 12;
    c->n_embd = 768;
    c->vocab_size = 50257;
    c->n_positions = 1024;
    c->seq_len = 64;
    c->train_batch_size = 0;
    c->train_micro_batch_size_per_gpu = 4;
    c->gradient_accumulation_steps = 1;
    c->train_iters = 100;
    c->optimizer_type = zt_xstrdup("AdamW");
    c->lr = 6e-4f;
    c->beta1 = 0.9f;
    c->beta2 = 0.95f;
    c->eps = 1e-8f;
    c->weight_decay = 0.0f;
    c->decay_all_params = 0;
    c->scheduler = ZT_SCHED_CONSTANT;
    c->warmup_min_lr = 0.0f;
    c->warmup_max_lr = -1.0f;
    c->warmup_num_steps = 1000;
    c->warmup_type_log = 1;
    c->total_num_steps = 0;
    c->cos_min_ratio = 0.0001f;
    c->warmup_min_ratio = 0.0f;
    c->gradient_clipping = 0.0f;
    c->loss_scale = 0.0f;
    c->initial_scale_power = 16;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;
    c->min_loss_scale = 1.0f;
    c->zero_stage = 0;
    c->overlap_comm = 0;
    c->contiguous_gradients = 1;
    c->reduce_bucket_size = 5e8;
    c->allgather_bucket_size = 5e8;
    c->stage3_prefetch_bucket_size = 5e7;
    c->stage3_param_persistence_threshold = 1e5;
    c->offload_device = ZT_OFFLOAD_NONE;
    c->offload_ratio = 1.0;
    c->offload_pin_memory = 0;
    c->offload_device_memory = 0;
    c->ckpt_enabled = 0;
    c->ckpt_number_checkpoints = 0;
    c->save_interval = 0;
    c->keep_last = 0;
    c->resume_mode = ZT_RESUME_AUTO;
    c->steps_per_print = 10;
    c->eval_interval = 0;
    c->eval_batches = 10;
    c->sample_interval = 0;
    c->sample_tokens = 64;
    c->wall_clock_breakdown = 0;
    c->seed = 1337;
    c->device = ZT_DEVICE_AUTO;
    c->comm_timeout = 600; /* ZT_COMM_TIMEOUT_DEFAULT */
    c->tensorboard.job_name = zt_xstrdup("DeepSpeedJobName");
    c->csv_monitor.job_name = zt_xstrdup("DeepSpeedJobName");
}

int zt_config_load(zt_config *cfg, const char *path, char *const *overrides, int n_overrides, zt_err *err) {
    zt_config_defaults(cfg);
    loader L;
    memset(&L, 0, sizeof L);
    L.cfg = cfg;
    L.err = err;
    L.adam_w_mode = 1;
    int rc = 0;
    if (path) {
        cfg->source_path = zt_xstrdup(path);
        rc = load_file(&L, path);
    }
    for (int i = 0; rc == 0 && i < n_overrides; i++) rc = apply_override(&L, overrides[i]);
    if (rc == 0) rc = finish(&L);
    free(L.recs);
    if (rc != 0) {
        zt_config_free(cfg);
        return -1;
    }
    cfg->effective_text = effective_text(cfg);
    return 0;
}

int zt_config_check_batch(zt_config *c, int world_size, zt_err *err) {
    if (world_size < 1) return zt_fail(err, "world size %d: expected >= 1", world_size);
    long ws = world_size, tb = c->train_batch_size;
    long mb = c->train_micro_batch_size_per_gpu, ga = c->gradient_accumulation_steps;
    int mb_given = c->micro_batch_given, ga_given = c->grad_accum_given;
    if (tb > 0) {
        if (mb_given && !ga_given) {
            if (tb % (mb * ws) != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by train_micro_batch_size_per_gpu %ld * "
                               "world size %ld (= %ld), so gradient_accumulation_steps cannot be derived",
                               tb, mb, ws, mb * ws);
            ga = tb / (mb * ws);
        } else if (!mb_given && ga_given) {
            if (tb % (ga * ws) != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by gradient_accumulation_steps %ld * "
                               "world size %ld (= %ld), so train_micro_batch_size_per_gpu cannot be derived",
                               tb, ga, ws, ga * ws);
            mb = tb / (ga * ws);
        } else if (!mb_given && !ga_given) {
            ga = 1;
            if (tb % ws != 0)
                return zt_fail(err,
                               "train_batch_size %ld is not divisible by world size %ld, so "
                               "train_micro_batch_size_per_gpu cannot be derived",
                               tb, ws);
            mb = tb / ws;
        }
        if (mb * ga * ws != tb)
            return zt_fail(err,
                           "train_batch_size %ld != train_micro_batch_size_per_gpu %ld * "
                           "gradient_accumulation_steps %ld * world size %ld (= %ld)",
                           tb, mb, ga, ws, mb * ga * ws);
    } else {
        tb = mb * ga * ws;
    }
    if (mb > INT_MAX || ga > INT_MAX) return zt_fail(err, "derived batch sizes are out of range");
    c->train_batch_size = tb;
    c->train_micro_batch_size_per_gpu = (int)mb;
    c->gradient_accumulation_steps = (int)ga;
    c->micro_batch_given = 1;
    c->grad_accum_given = 1;
    free(c->effective_text);
    c->effective_text = effective_text(c);
    return 0;
}

void zt_config_free(zt_config *c) {
    char **strs[] = {&c->source_path, &c->effective_text, &c->init_from,    &c->train_glob,
                     &c->val_glob,    &c->optimizer_type, &c->checkpoint_dir, &c->resume_path,
                     &c->metrics_file, &c->trace_file, &c->tensorboard.output_path, &c->tensorboard.job_name,
                     &c->csv_monitor.output_path, &c->csv_monitor.job_name};
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        free(*strs[i]);
        *strs[i] = NULL;
    }
}
