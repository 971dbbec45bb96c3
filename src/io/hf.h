/* hf.h — Hugging Face model directories, read and written without external libraries, so a
 * zerotrain model loads in transformers (AutoModelForCausalLM / AutoTokenizer / pipeline) as is, and a
 * Hugging Face model (any save_pretrained output, sharded or not) loads into zerotrain: GPT-2
 * (GPT2LMHeadModel) and the Llama family (LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM),
 * config.json read and written by hf_config.h.
 *
 * A directory holds config.json and either model.safetensors or model.safetensors.index.json
 * ({"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}) with the shards beside it;
 * an exported one also generation_config.json and, for a GPT-2 vocabulary, the tokenizer: vocab.json,
 * merges.txt, tokenizer_config.json, special_tokens_map.json. Weights are read and written one tensor
 * at a time (hf_safetensors.h): memory stays bounded by the largest tensor, never by the files. */
#ifndef ZT_HF_H
#define ZT_HF_H

#include <stddef.h>
#include <stdint.h>

#include "model/gpt2.h"
#include "util/util.h"

/* Reads DIR/config.json into SHAPE (zt_hf_config_parse: the family from model_type, absent = gpt2;
 * what zerotrain cannot honour is an error naming the file and key). */
int zt_hf_read_config(const char *dir, zt_gpt2_shape *shape, zt_err *err);
/* zt_hf_read_config, then its numbers checked against the headers of the weights beside it (wte,
 * GPT-2's wpe, the blocks h.0 ... h.(n_layer - 1) or model.layers.N): what a command sizes a model from, so that nothing is
 * allocated from a config.json its weights contradict (one line naming the tensor and both shapes). */
int zt_hf_read_model_shape(const char *dir, zt_gpt2_shape *shape, zt_err *err);

/* Loads every tensor of TABLE into FLAT (table.total fp32 values) from PATH: a directory (its
 * model.safetensors, else its model.safetensors.index.json and the shards it names), a .safetensors
 * file, or an index .json file. A shard the index names that is missing or truncated, or that
 * lacks a tensor the index puts in it, is an error naming the shard. Names match with or without
 * the "transformer." prefix; attn.bias / attn.masked_bias / rotary_emb.inv_freq buffers are ignored; a tied
 * model's lm_head.weight, when present, must have the embedding's shape (its data is not read). Any other tensor in the file is an error
 * (it means the config and the weights disagree). F32, BF16 and F16 are converted to fp32; a
 * non-finite value is an error naming the file, the tensor and the element.
 * Errors name the file and the tensor. */
int zt_hf_load(const char *path, const zt_param_table *table, float *flat, zt_err *err);

/* Fetches TABLE's flat fp32 values [offset, offset + n) into OUT; returns 0, or non-zero on failure. */
typedef int (*zt_hf_read_fn)(void *ctx, size_t offset, size_t n, float *out);

/* Writes DIR/model.safetensors (tensors named as the family's state dict: GPT-2's with the
 * "transformer." prefix; lm_head.weight only when untied; __metadata__ {"format": "pt"}),
 * DIR/config.json and DIR/generation_config.json (and removes a model.safetensors.index.json left
 * by an earlier sharded model there). DTYPE is "F32", "BF16" or "F16" (round to nearest even). Creates DIR when
 * missing. Each file is written to a temporary name, fsync'ed and renamed, so a crash never leaves a
 * half-written model. READ_TENSOR is called once per tensor, in table order. */
int zt_hf_save(const char *dir, const zt_param_table *table, const zt_gpt2_shape *shape, zt_hf_read_fn read_tensor,
               void *ctx, const char *dtype, zt_err *err);

/* Writes the tokenizer at VOCAB_DIR into DIR. GPT-2's encoder.json and vocab.bpe become vocab.json and
 * merges.txt (the same files), with tokenizer_config.json and special_tokens_map.json as transformers
 * writes them for gpt2 (model_max_length = n_positions; clean_up_tokenization_spaces false, so that
 * decoding gives back the exact text). A Hugging Face tokenizer.json (VOCAB_DIR the file, or a folder
 * holding one) is copied as it is, with a tokenizer_config.json naming PreTrainedTokenizerFast.
 * Returns 0 when written; 1 with WHY_NOT set when it cannot be (no tokenizer at VOCAB_DIR, a GPT-2
 * vocabulary and a model vocabulary smaller than GPT-2's, a tokenizer.json with more tokens than the
 * model); -1 with ERR set on a write error. */
int zt_hf_save_tokenizer(const char *dir, const char *vocab_dir, const zt_gpt2_shape *shape, zt_err *why_not,
                         zt_err *err);

/* 1 when DIR holds config.json and model.safetensors or model.safetensors.index.json, else 0. */
int zt_hf_probe(const char *dir);

/* The folder holding config.json for PATH: PATH itself, or the folder of the model.safetensors or index
 * .json file PATH names. */
void zt_hf_folder_of(const char *path, char *dir, size_t cap);
/* Loads a Hugging Face model (PATH = its directory, model.safetensors or the index file) into OUT after checking its
 * config.json against SHAPE (a Llama-family SHAPE may have a shorter n_positions). */
int zt_hf_init_from(const char *path, const zt_gpt2_shape *shape, const zt_param_table *table, float *out,
                    zt_err *err);

#endif
