/* hf_config.c — config.json <-> zt_gpt2_shape for GPT-2 and the Llama family (see hf_config.h). */
#include "io/hf_config.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- reading */

/* Fails with "PATH:LINE:COL: KEY is VALUE, WHY" for a value zerotrain does not implement. */
static int unsupported(const char *path, const zt_json *v, const char *key, const char *why, zt_err *err) {
    char value[96];
    if (v->type == ZT_JSON_STRING) snprintf(value, sizeof value, "\"%.80s\"", v->str);
    else if (v->type == ZT_JSON_NUMBER) snprintf(value, sizeof value, "%g", v->number);
    else if (v->type == ZT_JSON_BOOL) snprintf(value, sizeof value, "%s", v->boolean ? "true" : "false");
    else snprintf(value, sizeof value, "%s", zt_json_type_name(v->type));
    return zt_fail(err, "%s:%d:%d: %s is %s, %s", path, v->line, v->col, key, value, why);
}

static const zt_json *present(const zt_json *obj, const char *key) {
    const zt_json *v = zt_json_get(obj, key);
    return v && v->type != ZT_JSON_NULL ? v : NULL;
}

/* 0 and *OUT set; 1 when KEY is absent or null (an error when REQUIRED, naming FAMILY); -1 on a bad value */
static int get_int(const zt_json *obj, const char *key, int *out, const char *required_by, const char *path, zt_err *err) {
    const zt_json *v = present(obj, key);
    if (!v) return required_by ? zt_fail(err, "%s: missing \"%s\" (a %s config.json has it)", path, key, required_by) : 1;
    if (!v->is_uint || v->u < 1 || v->u > INT_MAX)
        return zt_fail(err, "%s:%d:%d: \"%s\" must be a positive integer", path, v->line, v->col, key);
    *out = (int)v->u;
    return 0;
}

/* a positive finite number, DEF when absent or null */
static int get_float(const zt_json *obj, const char *key, float *out, float def, const char *path, zt_err *err) {
    const zt_json *v = present(obj, key);
    *out = def;
    if (!v) return 0;
    if (v->type != ZT_JSON_NUMBER || !(v->number > 0) || !isfinite((float)v->number))
        return zt_fail(err, "%s:%d:%d: \"%s\" must be a positive number", path, v->line, v->col, key);
    *out = (float)v->number;
    return 0;
}

static int get_bool(const zt_json *obj, const char *key, int *out, int def, const char *path, zt_err *err) {
    const zt_json *v = present(obj, key);
    *out = def;
    if (!v) return 0;
    if (v->type != ZT_JSON_BOOL) return zt_fail(err, "%s:%d:%d: \"%s\" must be true or false", path, v->line, v->col, key);
    *out = v->boolean;
    return 0;
}

static int parse_gpt2(const zt_json *root, const char *path, zt_gpt2_shape *s, zt_err *err) {
    const char *need = "GPT-2";
    if (get_int(root, "n_layer", &s->n_layer, need, path, err) < 0 || get_int(root, "n_head", &s->n_head, need, path, err) < 0 ||
        get_int(root, "n_embd", &s->n_embd, need, path, err) < 0 ||
        get_int(root, "vocab_size", &s->vocab_size, need, path, err) < 0)
        return -1;
    int r = get_int(root, "n_positions", &s->n_positions, NULL, path, err);
    if (r == 1) r = get_int(root, "n_ctx", &s->n_positions, NULL, path, err);
    if (r < 0) return -1;
    if (r == 1) return zt_fail(err, "%s: missing \"n_positions\" (or \"n_ctx\")", path);
    if (s->n_embd % s->n_head) return zt_fail(err, "%s: n_embd %d is not a multiple of n_head %d", path, s->n_embd, s->n_head);
    const zt_json *v;
    if ((v = zt_json_get(root, "activation_function")) &&
        !(v->type == ZT_JSON_STRING && (strcmp(v->str, "gelu_new") == 0 || strcmp(v->str, "gelu_pytorch_tanh") == 0)))
        return unsupported(path, v, "activation_function", "zerotrain implements only \"gelu_new\" (GELU, tanh approximation)",
                           err);
    if ((v = zt_json_get(root, "layer_norm_epsilon")) && !(v->type == ZT_JSON_NUMBER && fabs(v->number - 1e-5) <= 1e-12))
        return unsupported(path, v, "layer_norm_epsilon", "zerotrain implements only 1e-05", err);
    if ((v = present(root, "n_inner")) && !(v->is_uint && v->u == 4 * (uint64_t)s->n_embd))
        return unsupported(path, v, "n_inner", "zerotrain's MLP is 4 * n_embd wide (null)", err);
    if ((v = zt_json_get(root, "scale_attn_by_inverse_layer_idx")) && v->type == ZT_JSON_BOOL && v->boolean)
        return unsupported(path, v, "scale_attn_by_inverse_layer_idx", "which zerotrain does not implement", err);
    if ((v = zt_json_get(root, "scale_attn_weights")) && v->type == ZT_JSON_BOOL && !v->boolean)
        return unsupported(path, v, "scale_attn_weights", "which zerotrain does not implement", err);
    if ((v = zt_json_get(root, "tie_word_embeddings")) && v->type == ZT_JSON_BOOL && !v->boolean)
        return unsupported(path, v, "tie_word_embeddings", "not supported (zerotrain ties GPT-2's LM head to wte)", err);
    return 0;
}

/* rope_scaling: null, type "default", or Llama 3's (its four numbers required) */
static int parse_rope_scaling(const zt_json *root, const char *path, zt_gpt2_shape *s, zt_err *err) {
    const zt_json *rs = present(root, "rope_scaling");
    if (!rs) return 0;
    if (rs->type != ZT_JSON_OBJECT)
        return zt_fail(err, "%s:%d:%d: \"rope_scaling\" must be an object or null", path, rs->line, rs->col);
    const zt_json *type = present(rs, "rope_type");
    const char *type_key = "rope_scaling.rope_type";
    if (!type) type = present(rs, "type"), type_key = "rope_scaling.type";
    if (!type) return zt_fail(err, "%s:%d:%d: rope_scaling has no \"rope_type\"", path, rs->line, rs->col);
    if (type->type == ZT_JSON_STRING && !strcmp(type->str, "default")) return 0;
    if (!(type->type == ZT_JSON_STRING && !strcmp(type->str, "llama3")))
        return unsupported(path, type, type_key, "zerotrain implements \"llama3\" (and \"default\")", err);
    const char *need = "llama3 rope_scaling";
    if (!present(rs, "factor") || !present(rs, "low_freq_factor") || !present(rs, "high_freq_factor"))
        return zt_fail(err, "%s:%d:%d: a llama3 rope_scaling needs factor, low_freq_factor and high_freq_factor", path,
                       rs->line, rs->col);
    if (get_float(rs, "factor", &s->rope_factor, 0, path, err) ||
        get_float(rs, "low_freq_factor", &s->rope_low_freq_factor, 0, path, err) ||
        get_float(rs, "high_freq_factor", &s->rope_high_freq_factor, 0, path, err) ||
        get_int(rs, "original_max_position_embeddings", &s->rope_original_max, need, path, err))
        return -1;
    if (s->rope_factor < 1 || !(s->rope_high_freq_factor > s->rope_low_freq_factor))
        return zt_fail(err, "%s:%d:%d: rope_scaling needs factor >= 1 and high_freq_factor > low_freq_factor", path,
                       rs->line, rs->col);
    return 0;
}

static int parse_llama(const zt_json *root, const char *path, zt_gpt2_shape *s, zt_err *err) {
    const char *need = zt_model_type_name(s->model_type);
    if (get_int(root, "num_hidden_layers", &s->n_layer, need, path, err) ||
        get_int(root, "num_attention_heads", &s->n_head, need, path, err) ||
        get_int(root, "hidden_size", &s->n_embd, need, path, err) ||
        get_int(root, "vocab_size", &s->vocab_size, need, path, err) ||
        get_int(root, "max_position_embeddings", &s->n_positions, need, path, err) ||
        get_int(root, "intermediate_size", &s->intermediate, need, path, err))
        return -1;
    if (get_int(root, "num_key_value_heads", &s->n_kv_head, NULL, path, err) < 0) return -1;
    if (!present(root, "num_key_value_heads")) s->n_kv_head = s->n_head;
    const zt_json *v;
    if (s->n_embd % s->n_head || (s->n_embd / s->n_head) % 2)
        return zt_fail(err, "%s: hidden_size %d over num_attention_heads %d is not an even head dimension", path, s->n_embd,
                       s->n_head);
    if (s->n_head % s->n_kv_head)
        return unsupported(path, present(root, "num_key_value_heads"), "num_key_value_heads",
                           "which does not divide num_attention_heads", err);
    if ((v = present(root, "head_dim")) && !(v->is_uint && v->u == (uint64_t)(s->n_embd / s->n_head)))
        return unsupported(path, v, "head_dim", "zerotrain's head dimension is hidden_size / num_attention_heads", err);
    if ((v = present(root, "hidden_act")) && !(v->type == ZT_JSON_STRING && !strcmp(v->str, "silu")))
        return unsupported(path, v, "hidden_act", "zerotrain's SwiGLU implements \"silu\"", err);
    if ((v = present(root, "pretraining_tp")) && !(v->is_uint && v->u == 1))
        return unsupported(path, v, "pretraining_tp", "zerotrain implements 1", err);
    int tie, attention_bias = 0, mlp_bias = 0, use_window = 0;
    if (get_float(root, "rope_theta", &s->rope_theta, 10000, path, err) ||
        get_float(root, "rms_norm_eps", &s->rms_norm_eps, 1e-6f, path, err) ||
        get_bool(root, "tie_word_embeddings", &tie, 0, path, err) ||
        (s->model_type == ZT_MODEL_LLAMA && (get_bool(root, "attention_bias", &attention_bias, 0, path, err) ||
                                             get_bool(root, "mlp_bias", &mlp_bias, 0, path, err))) ||
        get_bool(root, "use_sliding_window", &use_window, 0, path, err))
        return -1;
    s->untied = !tie;
    s->qkv_bias = attention_bias || s->model_type == ZT_MODEL_QWEN2;
    s->o_bias = attention_bias;
    s->mlp_bias = mlp_bias;
    if (s->model_type == ZT_MODEL_QWEN2 && use_window) /* Qwen2 windows only the layers past max_window_layers */
        return unsupported(path, present(root, "use_sliding_window"), "use_sliding_window",
                           "zerotrain's Qwen2 attends over the whole sequence (false)", err);
    if (s->model_type == ZT_MODEL_MISTRAL && get_int(root, "sliding_window", &s->sliding_window, NULL, path, err) < 0)
        return -1;
    return parse_rope_scaling(root, path, s, err);
}

int zt_hf_config_parse(const zt_json *root, const char *path, zt_gpt2_shape *s, zt_err *err) {
    if (root->type != ZT_JSON_OBJECT) return zt_fail(err, "%s: not a config.json (the top level is not a JSON object)", path);
    memset(s, 0, sizeof *s);
    const zt_json *v = zt_json_get(root, "model_type");
    int type = ZT_MODEL_GPT2;
    if (v) {
        type = -1;
        for (int t = ZT_MODEL_GPT2; t <= ZT_MODEL_MISTRAL && v->type == ZT_JSON_STRING; t++)
            if (!strcmp(v->str, zt_model_type_name((zt_model_type)t))) type = t;
        if (type < 0)
            return unsupported(path, v, "model_type", "zerotrain reads \"gpt2\", \"llama\", \"qwen2\" and \"mistral\" models",
                               err);
    }
    s->model_type = (zt_model_type)type;
    int rc = type == ZT_MODEL_GPT2 ? parse_gpt2(root, path, s, err) : parse_llama(root, path, s, err);
    s->padded_vocab = (int)(((int64_t)s->vocab_size + 127) / 128 * 128);
    return rc;
}

int zt_hf_config_parse_text(const char *text, size_t len, const char *name, zt_gpt2_shape *shape, zt_err *err) {
    zt_json root;
    int rc = zt_json_parse(text, len, name, &root, err);
    if (!rc) rc = zt_hf_config_parse(&root, name, shape, err);
    zt_json_free(&root);
    return rc;
}

/* ---------------------------------------------------------------- writing */

/* the shortest text that reads back as V (fp32); integral values as "N.0" */
static void put_float(zt_sb *out, const char *key, float v, const char *after) {
    char buf[40];
    for (int p = 1; p <= 9; p++) {
        snprintf(buf, sizeof buf, "%.*g", p, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    if (v == floorf(v) && fabsf(v) < 1e9f) snprintf(buf, sizeof buf, "%.1f", (double)v); /* 500000.0, as Python */
    zt_sb_printf(out, "  \"%s\": %s%s", key, buf, after);
}

static const char *json_bool(int b) { return b ? "true" : "false"; }

static void gpt2_text(const zt_gpt2_shape *s, const char *torch_dtype, int eos, zt_sb *out) {
    zt_sb_printf(out,
                 "{\n"
                 "  \"activation_function\": \"gelu_new\",\n"
                 "  \"architectures\": [\"GPT2LMHeadModel\"],\n"
                 "  \"attn_pdrop\": 0.0,\n"
                 "  \"bos_token_id\": %d,\n"
                 "  \"embd_pdrop\": 0.0,\n"
                 "  \"eos_token_id\": %d,\n"
                 "  \"initializer_range\": 0.02,\n"
                 "  \"layer_norm_epsilon\": 1e-05,\n"
                 "  \"model_type\": \"gpt2\",\n"
                 "  \"n_ctx\": %d,\n"
                 "  \"n_embd\": %d,\n"
                 "  \"n_head\": %d,\n"
                 "  \"n_inner\": null,\n"
                 "  \"n_layer\": %d,\n"
                 "  \"n_positions\": %d,\n"
                 "  \"reorder_and_upcast_attn\": false,\n"
                 "  \"resid_pdrop\": 0.0,\n"
                 "  \"scale_attn_by_inverse_layer_idx\": false,\n"
                 "  \"scale_attn_weights\": true,\n"
                 "  \"summary_activation\": null,\n"
                 "  \"summary_first_dropout\": 0.0,\n"
                 "  \"summary_proj_to_labels\": true,\n"
                 "  \"summary_type\": \"cls_index\",\n"
                 "  \"summary_use_proj\": true,\n"
                 "  \"tie_word_embeddings\": true,\n"
                 "  \"torch_dtype\": \"%s\",\n"
                 "  \"use_cache\": true,\n"
                 "  \"vocab_size\": %d\n"
                 "}\n",
                 eos, eos, s->n_positions, s->n_embd, s->n_head, s->n_layer, s->n_positions, torch_dtype, s->vocab_size);
}

/* LlamaForCausalLM / Qwen2ForCausalLM / MistralForCausalLM, keys in sorted order as save_pretrained writes them */
static void llama_text(const zt_gpt2_shape *s, const char *torch_dtype, int eos, zt_sb *out) {
    static const char *const arch[] = {"", "LlamaForCausalLM", "Qwen2ForCausalLM", "MistralForCausalLM"};
    int llama = s->model_type == ZT_MODEL_LLAMA, qwen2 = s->model_type == ZT_MODEL_QWEN2;
    zt_sb_printf(out, "{\n  \"architectures\": [\"%s\"],\n", arch[s->model_type]);
    if (llama) zt_sb_printf(out, "  \"attention_bias\": %s,\n", json_bool(s->o_bias));
    zt_sb_printf(out,
                 "  \"attention_dropout\": 0.0,\n"
                 "  \"bos_token_id\": %d,\n"
                 "  \"eos_token_id\": %d,\n"
                 "  \"head_dim\": %d,\n"
                 "  \"hidden_act\": \"silu\",\n"
                 "  \"hidden_size\": %d,\n"
                 "  \"initializer_range\": 0.02,\n"
                 "  \"intermediate_size\": %d,\n"
                 "  \"max_position_embeddings\": %d,\n",
                 eos, eos, zt_shape_head_dim(s), s->n_embd, s->intermediate, s->n_positions);
    if (qwen2) zt_sb_printf(out, "  \"max_window_layers\": %d,\n", s->n_layer);
    if (llama) zt_sb_printf(out, "  \"mlp_bias\": %s,\n", json_bool(s->mlp_bias));
    zt_sb_printf(out,
                 "  \"model_type\": \"%s\",\n"
                 "  \"num_attention_heads\": %d,\n"
                 "  \"num_hidden_layers\": %d,\n"
                 "  \"num_key_value_heads\": %d,\n",
                 zt_model_type_name(s->model_type), s->n_head, s->n_layer, zt_shape_kv_heads(s));
    if (llama) zt_sb_printf(out, "  \"pretraining_tp\": 1,\n");
    put_float(out, "rms_norm_eps", s->rms_norm_eps, ",\n");
    if (s->rope_factor > 0) {
        zt_sb_printf(out, "  \"rope_scaling\": {\n  ");
        put_float(out, "factor", s->rope_factor, ",\n  ");
        put_float(out, "high_freq_factor", s->rope_high_freq_factor, ",\n  ");
        put_float(out, "low_freq_factor", s->rope_low_freq_factor, ",\n");
        zt_sb_printf(out, "    \"original_max_position_embeddings\": %d,\n    \"rope_type\": \"llama3\"\n  },\n",
                     s->rope_original_max);
    } else {
        zt_sb_printf(out, "  \"rope_scaling\": null,\n");
    }
    put_float(out, "rope_theta", s->rope_theta, ",\n");
    if (!llama) {
        if (s->sliding_window > 0) zt_sb_printf(out, "  \"sliding_window\": %d,\n", s->sliding_window);
        else zt_sb_printf(out, "  \"sliding_window\": null,\n");
    }
    zt_sb_printf(out, "  \"tie_word_embeddings\": %s,\n  \"torch_dtype\": \"%s\",\n  \"use_cache\": true,\n",
                 json_bool(!s->untied), torch_dtype);
    if (qwen2) zt_sb_printf(out, "  \"use_sliding_window\": false,\n");
    zt_sb_printf(out, "  \"vocab_size\": %d\n}\n", s->vocab_size);
}

void zt_hf_config_text(const zt_gpt2_shape *s, const char *torch_dtype, int eos, zt_sb *out) {
    if (zt_shape_is_llama(s)) llama_text(s, torch_dtype, eos, out);
    else gpt2_text(s, torch_dtype, eos, out);
}

const char *zt_hf_config_mismatch(const zt_gpt2_shape *a, const zt_gpt2_shape *b) {
    int llama = zt_shape_is_llama(a);
    if (a->model_type != b->model_type) return "model_type";
    if (a->n_layer != b->n_layer) return llama ? "num_hidden_layers" : "n_layer";
    if (a->n_head != b->n_head) return llama ? "num_attention_heads" : "n_head";
    if (a->n_embd != b->n_embd) return llama ? "hidden_size" : "n_embd";
    if (a->vocab_size != b->vocab_size) return "vocab_size";
    if (a->n_positions != b->n_positions) return llama ? "max_position_embeddings" : "n_positions";
    if (!llama) return NULL;
    if (zt_shape_kv_heads(a) != zt_shape_kv_heads(b)) return "num_key_value_heads";
    if (a->intermediate != b->intermediate) return "intermediate_size";
    if (a->untied != b->untied) return "tie_word_embeddings";
    if (a->qkv_bias != b->qkv_bias || a->o_bias != b->o_bias) return "attention_bias";
    if (a->mlp_bias != b->mlp_bias) return "mlp_bias";
    if (a->rope_theta != b->rope_theta) return "rope_theta";
    if (a->rms_norm_eps != b->rms_norm_eps) return "rms_norm_eps";
    if (a->sliding_window != b->sliding_window) return "sliding_window";
    if (a->rope_factor != b->rope_factor || a->rope_low_freq_factor != b->rope_low_freq_factor ||
        a->rope_high_freq_factor != b->rope_high_freq_factor ||
        (a->rope_factor > 0 && a->rope_original_max != b->rope_original_max))
        return "rope_scaling";
    return NULL;
}
