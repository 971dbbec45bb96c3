/* config_schema.h — internal to the config module (config.c, config_keys.c, config_checks.c,
 * config_deepspeed.c, config_records.c): the shape of one key declaration, the key table, what the
 * table derives (defaults, effective text, key lookup, near-miss suggestions) and the loader state
 * that the DeepSpeed rules and the cross-key checks read. Nothing outside the config module
 * includes this. */
#ifndef ZT_CONFIG_SCHEMA_H
#define ZT_CONFIG_SCHEMA_H

#include <math.h>
#include <stddef.h>

#include "config/config.h"

/* how a key's value is read and where it is stored */
enum {
    K_END = 0,
    K_SECTION,     /* a mapping of keys below it */
    K_INT,         /* int field */
    K_LONG,        /* long field */
    K_U64,         /* unsigned long long field */
    K_FLOAT,       /* float field */
    K_DOUBLE,      /* double field */
    K_BOOL,        /* int field, 0/1 */
    K_STR,         /* char * field; null or "" = NULL */
    K_ENUM,        /* int field: a name from .ev (case-insensitive) */
    K_ENUMSTR,     /* char * field: the canonical name from .ev */
    K_BETAS,       /* [beta1, beta2]: float fields .off and .off2 */
    K_RATIO,       /* double field: a number in [lo, hi] or "auto" (stored as -1) */
    K_BYTES,       /* double field: a byte count, a number or a string with a unit (zt_parse_bytes) */
    K_RESUME,      /* int field (ZT_RESUME_*) and char * field .off2 (the path) */
    K_OFF_SECTION, /* a DeepSpeed feature section, accepted while its `enabled` is false; other keys
                      in it are not read (they configure the feature) */
    K_NOTE,        /* accepted with any value and a one-line note: it has no effect here */
    K_DSKEY,       /* a DeepSpeed key for a feature zerotrain does not implement: an error */
};

enum {
    F_EMIT = 1 << 0,         /* written into the effective config */
    F_AUTO = 1 << 1,         /* "auto" (Hugging Face's placeholder) means: derive it (config_deepspeed.c) */
    F_ONLY_FALSE = 1 << 2,   /* bool: true asks for a feature zerotrain does not implement */
    F_ONLY_TRUE = 1 << 3,    /* bool: false asks for a feature zerotrain does not implement */
    F_NULL_DEFAULT = 1 << 4, /* null means the default */
    F_INERT = 1 << 5,        /* read and checked, but does not change this run: named in one note */
};

/* keys the loader treats specially beyond their kind */
enum {
    T_NONE = 0,
    T_SCHED,       /* section scheduler: a type is then required */
    T_SCHED_TYPE,  /* scheduler.type */
    T_SCHED_PARAM, /* scheduler.params.X: written only when the type takes X */
    T_ACT,         /* section activation_checkpointing: present means enabled */
    T_ACT_ENABLED, /* activation_checkpointing.enabled */
    T_TB,          /* train_batch_size: null = derived */
    T_MICRO,       /* train_micro_batch_size_per_gpu: null = derived; records "given" */
    T_ACCUM,       /* gradient_accumulation_steps: null = derived; records "given" */
    T_ADAM_W_MODE, /* kept by the loader for a cross-check */
    T_CPU_OFFLOAD, /* zero_optimization.cpu_offload: DeepSpeed's old name for offload_optimizer cpu */
};

typedef struct zt_enumval {
    const char *name;
    int value;
} zt_enumval;

typedef struct zt_keydef {
    const char *path;             /* dotted name: "optimizer.params.lr" */
    int kind;                     /* K_* */
    size_t off, off2;             /* offsetof(zt_config, field); ZT_NOF = read and checked, not stored */
    double def, def2;             /* default of numeric, bool and enum fields */
    const char *def_str;          /* default of string fields (NULL = none) */
    double lo, hi;                /* numeric range, inclusive; hi = INFINITY: no upper bound */
    int lo_excl;                  /* lo itself is not allowed */
    int flags;                    /* F_* */
    int tag;                      /* T_* */
    const zt_enumval *ev;         /* K_ENUM, K_ENUMSTR */
    const char *const *ds_names;  /* K_ENUM*: DeepSpeed's names that zerotrain refuses as unsupported */
    const char *what;             /* K_ENUM* with ds_names: "optimizer", "scheduler" */
    const char *hint;             /* K_DSKEY, K_OFF_SECTION, F_ONLY_*: appended to the refusal */
    const char *help;             /* one line: what the key does here */
    const char *def_shown;        /* the default as `config --keys` shows it, where the stored one is a
                                     marker for "derived" (warmup_max_lr -1: the optimizer's lr) */
} zt_keydef;

#define ZT_NOF ((size_t)-1)

/* the table, ending with a K_END row */
extern const zt_keydef zt_config_keys[];
extern const zt_enumval zt_sched_types[];

const zt_keydef *zt_key_find(const char *path);
/* the last component of a dotted path */
const char *zt_key_leaf(const char *path);
/* whether path is a direct child of parent ("" = top level) */
int zt_key_is_child(const char *path, const char *parent);
const char *zt_enum_name(const zt_enumval *ev, int value);
/* " (did you mean 'x'?)" for a near-miss of word among the keys directly under section parent
 * ("" = top level) / among an enum's names; "" if none is near */
void zt_key_suggest(const char *word, const char *parent, char *out, size_t cap);
void zt_enum_suggest(const char *word, const zt_enumval *ev, char *out, size_t cap);
/* an enum's names as "a, b or c" */
void zt_enum_list(const zt_enumval *ev, char *out, size_t cap);
/* scheduler parameters a scheduler type takes, NULL-terminated */
const char *const *zt_sched_params_of(int type);
/* sets d's field(s) to d's default */
void zt_key_set_default(zt_config *cfg, const zt_keydef *d);
/* appends d's value as YAML (a scalar or a flow list) */
void zt_key_put_value(zt_sb *b, const zt_keydef *d, const zt_config *cfg);
/* the effective config (every F_EMIT key) as YAML; malloc'ed */
char *zt_config_effective_text(const zt_config *cfg);

/* ---- loader state shared with config_deepspeed.c ---- */

typedef struct zt_posrec {
    char path[96];
    char where[400]; /* "FILE:L:C: path" or "--set KEY[: path]" */
    int is_auto;     /* the value was "auto" */
} zt_posrec;

typedef struct zt_loader {
    zt_config *cfg;
    zt_err *err;
    const char *file; /* file being read (NULL while applying overrides) */
    const char *ov;   /* the override key being applied */
    zt_posrec *recs;  /* every value set, in order (the latest record of a path wins) */
    int nrec, caprec;
    int sched_seen, sched_type_given;
    int act_seen, act_enabled_given;
    int adam_w_mode;
    /* overrides come first: the key paths they set (a mapping value: the paths it names), whose
     * values in the file are not read at all, and the file's keys left unread for that reason */
    zt_sb replaced, unread; /* paths, each followed by a newline */
    int overrides_only; /* zt_config_check_overrides: no file, so `KEY=null` may remove a file key we cannot see */
} zt_loader;

/* config_records.c: index of the latest record of path, -1 if never set */
int zt_loader_rec_index(const zt_loader *L, const char *path);
/* "WHERE: msg" at the latest of recs[0..n) that set path, else at the file source (or "config") */
int zt_fail_at_rec(const zt_posrec *recs, int n, const char *source, const char *path, zt_err *err,
                   const char *msg);
/* error at where path was last set: "WHERE: MSG" */
int zt_fail_rec(const zt_loader *L, const char *path, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* config_deepspeed.c: run after every file key and override is applied, before the cross-key
 * checks: fills "auto" values that depend on other keys, refuses values for features zerotrain
 * does not implement yet (at their position), and notes accepted keys without effect. */
int zt_config_deepspeed_finish(zt_loader *L);
/* config_checks.c: the checks between keys (divisibility, lengths, exclusive options), run once after
 * the DeepSpeed rules; each error names where the key it blames was last set. */
int zt_config_cross_checks(zt_loader *L);
/* the one info line about "auto" keys (called once the batch sizes are final) */
void zt_config_log_auto(const zt_config *cfg);

#endif
