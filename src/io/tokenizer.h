/* tokenizer.h — byte-level BPE: GPT-2's (the "gpt2" encoding of OpenAI's encoder.py and tiktoken)
 * loaded from encoder.json + vocab.bpe (data/gpt2/), or a Hugging Face tokenizer.json of the same
 * kind (GPT-2, Llama 3, Qwen2 style: tokenizer_json.c says what it accepts), with PCRE2 for the
 * pre-tokenizer regex. What follows describes GPT-2's files; a tokenizer.json differs in
 *   - its pattern: GPT-2's (ByteLevel with use_regex) or its Split regex (\s and \S rewritten to
 *     White_Space as below), whose matches and the text between them are the pieces;
 *   - its added tokens (special or not): split off the text before pre-tokenization, leftmost
 *     and then longest first, those with "normalized": false first, as Hugging Face does; each is
 *     its own id (so "<|endoftext|>" in the text is the token there);
 *   - "ignore_merges" (Llama 3): a piece that is in the vocabulary is that token, unmerged;
 *   - an NFC normalizer (Qwen2's, by libutf8proc): applied after the "normalized": false added
 *     tokens are split off, before the "normalized": true ones are matched;
 *   - its ids: any vocabulary size (the largest id + 1, added tokens included; gaps decode to
 *     nothing), and zt_tokenizer_eot is its <|endoftext|>, <|end_of_text|> or </s>, if any.
 *
 * Encoding matches OpenAI's encoder.py (and tiktoken's encode_ordinary) on valid UTF-8 text:
 *   - pre-tokenization by GPT-2's pattern
 *       's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *     where \s is spelled out as Unicode White_Space (the 25 code points Python's `regex` module
 *     matches: U+0009..U+000D, U+0020, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
 *     U+202F, U+205F, U+3000). PCRE2's own \s also matches U+180E, and Python's str.isspace()
 *     also U+001C..U+001F; neither is White_Space, so neither is whitespace here.
 *     \p{L} and \p{N} come from libpcre2's Unicode tables (Unicode 14.0 in PCRE2 10.42); code
 *     points first assigned in a later Unicode version may split differently than a newer `regex`.
 *   - each piece's bytes are merged by vocab.bpe rank (merges work on byte strings: a literal 'Ġ'
 *     in the input is its UTF-8 bytes C4 A0, never a space).
 *   - the literal text "<|endoftext|>" is encoded as ordinary text; it never yields ZT_TOKEN_EOT.
 *
 * Invalid UTF-8 (which encoder.py/tiktoken cannot receive, since they take str): the input is split
 * into maximal runs of valid UTF-8 (RFC 3629: no overlong forms, no surrogates, <= U+10FFFF) and
 * the bytes outside them. Each valid run is pre-tokenized on its own, exactly as if it were a whole
 * text (so a whitespace run just before an invalid byte is "at the end of input" for \s+(?!\S));
 * each invalid byte is a piece of its own and becomes its single-byte token. Every byte string
 * therefore encodes without error, and decode(encode(x)) == x for every x.
 *
 * Block by block: zt_tokenizer_last_cut finds where a text may be cut so that its parts, encoded
 * alone, give exactly the ids of the whole (`zerotrain tokenize` streams its inputs that way).
 *
 * Threads: a loaded zt_tokenizer is read-only; encode/decode may run concurrently on it (a
 * zt_encoder is one thread's at a time). */
#ifndef ZT_TOKENIZER_H
#define ZT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "util/util.h"

#define ZT_GPT2_VOCAB_SIZE 50257
#define ZT_TOKEN_EOT 50256 /* <|endoftext|> */

typedef struct zt_tokenizer zt_tokenizer;

/* A growable id list; zero-initialise ({0}) before first use, zt_ids_free when done. */
typedef struct zt_ids {
    int *data;
    size_t n, cap;
} zt_ids;

void zt_ids_push(zt_ids *ids, int id);
void zt_ids_free(zt_ids *ids);

/* Loads PATH: a tokenizer.json file, or a folder with tokenizer.json (preferred) or encoder.json
 * and vocab.bpe. Missing or malformed files fail with a message naming the file and the
 * line:column (JSON, read by json.h) or line (vocab.bpe); a tokenizer.json this tokenizer cannot
 * reproduce (a normalizer other than NFC, Metaspace, byte_fallback, a model other than BPE) fails with one line
 * naming the file and what is unsupported; any file over 64 MiB fails unread past the cap. */
zt_tokenizer *zt_tokenizer_load(const char *path, zt_err *err);
void zt_tokenizer_free(zt_tokenizer *tok);

/* The largest id + 1 (ZT_GPT2_VOCAB_SIZE for GPT-2's files). */
int zt_tokenizer_vocab_size(const zt_tokenizer *tok);
/* The id that ends a document (ZT_TOKEN_EOT for GPT-2's files), or -1 when it has none. */
int zt_tokenizer_eot(const zt_tokenizer *tok);

/* Appends the ids of TEXT[0..LEN) to OUT (which is not cleared). TEXT is read by length, may hold
 * NUL and invalid UTF-8 bytes. Returns 0, or -1 with ERR set (only on an internal regex failure). */
int zt_tokenizer_encode(const zt_tokenizer *tok, const char *text, size_t len, zt_ids *out, zt_err *err);

/* An encoder for one thread: zt_tokenizer_encode's work space (its piece cache, bounded at about
 * 3.5 MiB) kept from call to call, so a text encoded block by block costs what it costs whole. */
typedef struct zt_encoder zt_encoder;
zt_encoder *zt_encoder_new(const zt_tokenizer *tok);
/* zt_tokenizer_encode with ENC's work space. */
int zt_encoder_encode(zt_encoder *enc, const char *text, size_t len, zt_ids *out, zt_err *err);
void zt_encoder_free(zt_encoder *enc);

/* Where a text may be cut so that encoding the two parts on their own gives exactly the ids of
 * the whole: the largest a in [max(FROM, 1), LEN - R] (R = zt_tokenizer_cut_reach) where the
 * character before a is not White_Space and the one at a is White_Space, or of another class
 * (\p{L}, \p{N}, the rest; an apostrophe and a letter never: "'s"), or either side is an invalid
 * byte; an added token never spans a cut. A tokenizer.json's Llama 3 or Qwen2 pattern cuts only
 * after a letter before White_Space, another pattern only at invalid bytes. Looks at
 * TEXT[a-R, a+R) only, so a cut found in a prefix of a longer text holds for the longer text. 0
 * when there is none (a run of one class, such as a long word or a long run of spaces, has no cut
 * inside it). */
size_t zt_tokenizer_last_cut(const zt_tokenizer *tok, const char *text, size_t from, size_t len);
/* How far zt_tokenizer_last_cut looks on either side of a cut: 4, or the longest added token. */
size_t zt_tokenizer_cut_reach(const zt_tokenizer *tok);

/* Decodes N ids into OUT (at most CAP bytes written, no NUL added) and returns the full byte
 * length of the decoded text (like snprintf: a result > CAP means OUT was cut short). ZT_TOKEN_EOT
 * decodes to "<|endoftext|>", an added token to its text; ids outside [0, vocab size) decode to nothing. */
size_t zt_tokenizer_decode(const zt_tokenizer *tok, const int *ids, size_t n, char *out, size_t cap);
/* The same into a new NUL-terminated buffer (free() it); *len (when not NULL) gets the length. */
char *zt_tokenizer_decode_alloc(const zt_tokenizer *tok, const int *ids, size_t n, size_t *len);
/* The bytes of one token (not NUL-terminated); NULL with *len = 0 for an out-of-range id. */
const char *zt_tokenizer_token_bytes(const zt_tokenizer *tok, int id, size_t *len);

#endif
