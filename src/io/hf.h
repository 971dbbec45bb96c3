/* hf.h — Hugging Face GPT-2 directories: model.safetensors + config.json, read and written without
 * external libraries, so a zerotrain model loads in transformers.GPT2LMHeadModel.from_pretrained(DIR)
 * as is, and a Hugging Face GPT-2 checkpoint (e.g. the "gpt2" hub directory) loads into zerotrain.
 *
 * safetensors: an 8-byte little-endian u64 header length N, N bytes of JSON
 *   {"NAME": {"dtype": "F32"|"BF16"|"F16", "shape": [...], "data_offsets": [begin, end]}, ...,
 *    "__metadata__": {...}}
 * then the data buffer; offsets are relative to the buffer start, tensors are row-major and
 * little-endian. Both directions read or write one tensor at a time: memory stays bounded by the
 * largest tensor (plus a fixed conversion chunk), never by the file. */
#ifndef ZT_HF_H
#define ZT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt2.h"
#include "util/util.h"

/* Reads DIR/config.json: n_layer, n_head, n_embd, vocab_size and n_positions (n_ctx when
 * n_positions is absent). activation_function must be gelu_new / gelu_pytorch_tanh (or absent),
 * layer_norm_epsilon 1e-5 (or absent), n_inner null or 4 n_embd, and the attention variants
 * zerotrain does not implement (scale_attn_by_inverse_layer_idx, scale_attn_weights false) off;
 * anything else is an error naming the file and key. padded_vocab = vocab_size rounded up to 128. */
int zt_hf_read_config(const char *dir, zt_gpt2_shape *shape, zt_err *err);

/* Loads every tensor of TABLE into FLAT (table.total fp32 values) from PATH: a directory (its
 * model.safetensors) or a .safetensors file. Names match with or without the "transformer." prefix;
 * attn.bias / attn.masked_bias buffers are ignored; lm_head.weight, when present, must have wte's
 * shape (the head is tied to wte, its data is not read). Any other tensor in the file is an error
 * (it means the config and the weights disagree). F32, BF16 and F16 are converted to fp32.
 * Errors name the file and the tensor. */
int zt_hf_load(const char *path, const zt_param_table *table, float *flat, zt_err *err);

/* Fetches TABLE's flat fp32 values [offset, offset + n) into OUT; returns 0, or non-zero on failure. */
typedef int (*zt_hf_read_fn)(void *ctx, size_t offset, size_t n, float *out);

/* Writes DIR/model.safetensors (tensors named as GPT2LMHeadModel's state dict, with the
 * "transformer." prefix, no lm_head.weight since it is tied; __metadata__ {"format": "pt"}) and
 * DIR/config.json. DTYPE is "F32", "BF16" or "F16" (round to nearest even). Creates DIR when
 * missing. Each file is written to a temporary name, fsync'ed and renamed, so a crash never leaves a
 * half-written model. READ_TENSOR is called once per tensor, in table order. */
int zt_hf_save(const char *dir, const zt_param_table *table, const zt_gpt2_shape *shape, zt_hf_read_fn read_tensor,
               void *ctx, const char *dtype, zt_err *err);

/* 1 when DIR holds model.safetensors and config.json (regular files), else 0. */
int zt_hf_probe(const char *dir);

/* Loads a Hugging Face GPT-2 (PATH = model.safetensors or its directory) into OUT after checking its
 * config.json against SHAPE. */
int zt_hf_init_from(const char *path, const zt_gpt2_shape *shape, const zt_param_table *table, float *out,
                    zt_err *err);

#endif
