/* init_from.c — model.init_from's architecture into the config (see init_from.h). */
#include "engine/init_from.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "engine/session.h"
#include "io/hf.h"

/* the model keys a config may give beside model.init_from, and the field each sets */
static const struct model_key { const char *path; size_t field; int is_float; } model_keys[] = {
    {"model.model_type", offsetof(zt_config, model_type), 0},
    {"model.n_layer", offsetof(zt_config, n_layer), 0},
    {"model.n_head", offsetof(zt_config, n_head), 0},
    {"model.n_embd", offsetof(zt_config, n_embd), 0},
    {"model.vocab_size", offsetof(zt_config, vocab_size), 0},
    {"model.n_positions", offsetof(zt_config, n_positions), 0},
    {"model.num_key_value_heads", offsetof(zt_config, n_kv_head), 0},
    {"model.intermediate_size", offsetof(zt_config, intermediate_size), 0},
    {"model.tie_word_embeddings", offsetof(zt_config, tie_word_embeddings), 0},
    {"model.attention_bias", offsetof(zt_config, attention_bias), 0},
    {"model.mlp_bias", offsetof(zt_config, mlp_bias), 0},
    {"model.sliding_window", offsetof(zt_config, sliding_window), 0},
    {"model.rope_theta", offsetof(zt_config, rope_theta), 1},
    {"model.rms_norm_eps", offsetof(zt_config, rms_norm_eps), 1},
    {"model.rope_scaling.rope_type", offsetof(zt_config, rope_type), 0},
    {"model.rope_scaling.factor", offsetof(zt_config, rope_factor), 1},
    {"model.rope_scaling.low_freq_factor", offsetof(zt_config, rope_low_freq_factor), 1},
    {"model.rope_scaling.high_freq_factor", offsetof(zt_config, rope_high_freq_factor), 1},
    {"model.rope_scaling.original_max_position_embeddings", offsetof(zt_config, rope_original_max), 0},
};

static double field_of(const zt_config *c, const struct model_key *k) {
    const char *p = (const char *)c + k->field;
    return k->is_float ? (double)*(const float *)p : (double)*(const int *)p;
}

int zt_config_adopt_init_from(zt_config *cfg, zt_err *err) {
    if (!cfg->init_from) return 0;
    char dir[4096];
    zt_hf_folder_of(cfg->init_from, dir, sizeof dir);
    zt_gpt2_shape theirs;
    if (zt_hf_read_model_shape(dir, &theirs, err)) return -1;
    zt_config folder = *cfg; /* the folder's model over the config's other keys (no strings are freed) */
    zt_shape_to_config(&theirs, &folder);
    if (cfg->n_kv_head == 0 && zt_config_was_set(cfg, "model.num_key_value_heads")) cfg->n_kv_head = cfg->n_head;
    for (size_t i = 0; i < sizeof model_keys / sizeof *model_keys; i++) {
        const struct model_key *k = &model_keys[i];
        if (!zt_config_was_set(cfg, k->path)) continue;
        double ours = field_of(cfg, k), want = field_of(&folder, k);
        int shorter_context = !strcmp(k->path, "model.n_positions") && theirs.model_type != 0 && ours <= want;
        if (ours == want || shorter_context) continue;
        char a[32], b[32];
        snprintf(a, sizeof a, "%g", ours);
        snprintf(b, sizeof b, "%g", want);
        if (k->field == offsetof(zt_config, model_type)) {
            snprintf(a, sizeof a, "%s", zt_model_type_name((zt_model_type)cfg->model_type));
            snprintf(b, sizeof b, "%s", zt_model_type_name(theirs.model_type));
        }
        return zt_config_fail_key(cfg, k->path, err,
                                  "%s differs from %s/config.json's %s (model.init_from takes the model from there: leave "
                                  "the key out, or make it agree)", a, dir, b);
    }
    int n_positions = cfg->n_positions;
    zt_shape_to_config(&theirs, cfg);
    if (zt_config_was_set(cfg, "model.n_positions")) cfg->n_positions = n_positions; /* checked above */
    zt_config_refresh_text(cfg);
    return 0;
}
