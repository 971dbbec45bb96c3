/* sample.h — text generation from a session's model (temperature, top-k, seeded), the
 * `zerotrain sample` command (which prints the text token by token as it is generated) and
 * `zerotrain eval`, and finding the bundled vocabulary. */
#ifndef ZT_SAMPLE_H
#define ZT_SAMPLE_H

#include <stdint.h>
#include "engine/session.h"
#include "io/tokenizer.h"

typedef struct zt_sample_opts {
    int max_tokens;
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = whole vocabulary; 1 = greedy */
    uint64_t seed;
    void (*on_token)(void *ctx, int id); /* called with each id as soon as it is produced (every rank), or NULL */
    void *ctx;
} zt_sample_opts;

/* Appends up to max_tokens generated ids to out, continuing prompt (n_prompt >= 1 ids). Every rank
 * must call it (stage 3 gathers parameters collectively); all ranks produce the same ids. */
int zt_generate(zt_session *s, const int *prompt, int n_prompt, const zt_sample_opts *o, zt_ids *out, zt_err *err);
/* Generates n tokens after <|endoftext|> and prints the decoded text on rank 0 (used by train). */
void zt_sample_print(zt_session *s, int n_tokens, uint64_t seed);
/* The vocabulary directory: $ZEROTRAIN_VOCAB, ./data/gpt2, or data/gpt2 beside the binary. */
const char *zt_default_vocab_dir(void);

#endif
