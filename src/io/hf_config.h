/* hf_config.h — a model's shape as Hugging Face's config.json says it, both ways, for every family
 * zerotrain trains: GPT2LMHeadModel ("gpt2"), LlamaForCausalLM ("llama"), Qwen2ForCausalLM ("qwen2")
 * and MistralForCausalLM ("mistral"). One reader and one writer serve an imported folder, an exported
 * one and a checkpoint's index (whose `model_config` attribute is this text for the Llama family), so
 * the three can never describe a model differently.
 *
 * Reading is strict: a key zerotrain would have to ignore to load the weights (another activation, a
 * rope_scaling type it does not implement, a head_dim that is not hidden_size / num_attention_heads,
 * a sliding window Qwen2 applies per layer) is an error naming the file, line, column and key. */
#ifndef ZT_HF_CONFIG_H
#define ZT_HF_CONFIG_H

#include "model/gpt2.h"
#include "util/json.h"
#include "util/util.h"

/* The shape ROOT (a parsed config.json; PATH names it in messages) describes. model_type absent is
 * GPT-2. padded_vocab = vocab_size rounded up to 128. */
int zt_hf_config_parse(const zt_json *root, const char *path, zt_gpt2_shape *shape, zt_err *err);
/* The same from TEXT[0..LEN) (NAME names it in messages). */
int zt_hf_config_parse_text(const char *text, size_t len, const char *name, zt_gpt2_shape *shape, zt_err *err);

/* SHAPE's config.json as transformers writes it for its family (keys sorted, two-space indent),
 * TORCH_DTYPE "float32", "bfloat16" or "float16"; EOS the id written as bos/eos_token_id. Floats are
 * written as the shortest text that reads back as the same fp32 value, so text -> shape -> text is
 * exact. Appends to OUT. */
void zt_hf_config_text(const zt_gpt2_shape *shape, const char *torch_dtype, int eos, zt_sb *out);

/* The config.json key of the first field in which A and B differ (their family included), or NULL when
 * they describe the same model. */
const char *zt_hf_config_mismatch(const zt_gpt2_shape *a, const zt_gpt2_shape *b);

#endif
