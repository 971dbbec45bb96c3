/* tokenizer_impl.h — private to the tokenizer's files (tokenizer.c, tokenizer_json.c): the loaded
 * tokenizer's tables and the small helpers both loaders fill them with. A loader fills the
 * vocabulary (off/bytes/vmap/byte_id), the merge table (pairs), the added tokens and the
 * pre-tokenizer's pattern; tokenizer.c compiles the pattern and encodes and decodes. */
#ifndef ZT_TOKENIZER_IMPL_H
#define ZT_TOKENIZER_IMPL_H

#include "io/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <stdlib.h>
#include <string.h>

/* No byte of a character below U+0300 (the first combining mark) is 0xCC or above, and every
 * such character is a starter NFC leaves as it is and never joins to the one before: text
 * without such a byte is its own NFC. */
#define ZT_NFC_FIRST_LEAD 0xCC

/* the most a vocabulary file may hold (GPT-2's encoder.json is 1.0 MB, Llama 3's tokenizer.json
 * 9 MB): a file that is /dev/zero or a runaway download fails with one line instead of filling
 * the memory */
#define VOCAB_FILE_MAX_BYTES (64u << 20)

/* Unicode White_Space, as a character-class body (see tokenizer.h) */
#define ZT_TOK_WS "\\t-\\r \\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"

/* GPT-2's pattern with \s spelled out as Unicode White_Space (see tokenizer.h). Compiled anchored:
 * some alternative always matches at the current position, so anchored matching from the end of
 * the previous match is the same as encoder.py's re.findall. */
#define ZT_GPT2_PATTERN                                                                                                  \
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^" ZT_TOK_WS "\\p{L}\\p{N}]+|[" ZT_TOK_WS "]+(?![^" ZT_TOK_WS "])|[" ZT_TOK_WS   \
    "]+"

/* How zt_tokenizer_last_cut finds cuts: GPT-2's pattern's character classes, or (Llama 3's and
 * Qwen2's patterns) only a letter followed by White_Space, or never (a pattern it does not know). */
enum { ZT_CUTS_GPT2, ZT_CUTS_LETTER_SPACE, ZT_CUTS_NONE };

typedef struct pair_slot {
    uint64_t key; /* (left << 32) | right; UINT64_MAX = empty */
    int32_t rank, merged;
} pair_slot;

/* A token matched in the text before pre-tokenization (Hugging Face's added_tokens). */
typedef struct zt_added_token {
    int id;
    int normalized; /* matched in a second pass, on what the first (normalized: false) left */
    uint32_t len;   /* its bytes are t->bytes[t->off[id] ..) */
} zt_added_token;

struct zt_tokenizer {
    int n_vocab;     /* the largest id + 1 */
    uint32_t *off;   /* [n_vocab + 1]: token id -> [off[id], off[id+1]) in bytes (empty: no such id) */
    uint8_t *bytes;
    int byte_id[256];
    uint32_t *vmap;  /* BPE token bytes -> id + 1 (0 = empty), open addressing; no added-only token */
    size_t vmap_mask;
    pair_slot *pairs;
    size_t pair_mask;
    size_t pair_shift; /* size_t, not int: the merge loop's int stores cannot alias it */
    int eot;           /* the id that joins documents (<|endoftext|> and the like), -1: none */
    int ignore_merges; /* a piece that is a token is that token, unmerged (Llama 3) */
    int nfc;           /* the normalizer is NFC (Qwen2's): what the raw added tokens leave is normalized */
    zt_added_token *added; /* longest first */
    int n_added;
    uint32_t added_max;     /* the longest added token's length in bytes */
    uint8_t added_first[256]; /* bytes an added token starts with */
    char *pattern;     /* the pre-tokenizer's regex in PCRE2 syntax; NULL: each valid run is one piece */
    int anchored;      /* the pattern matches at every position (GPT-2's) */
    int cuts;          /* ZT_CUTS_* */
    pcre2_code *re;
    pcre2_code *letter_digit; /* (\p{L})|\p{N}: a character's class for zt_tokenizer_last_cut */
    int jit;
};

/* Loads a Hugging Face tokenizer.json into T (zeroed): vocabulary, merges, added tokens, pattern.
 * tokenizer_json.c. Errors name PATH and what is unsupported or malformed. */
int zt_tokenizer_json_fill(zt_tokenizer *t, const char *path, zt_err *err);

/* GPT-2's bytes_to_unicode: bytes 33-126, 161-172, 174-255 are themselves, the other 68 map to
 * U+0100.. in byte order. */
static inline void zt_byte_alphabet(int b2u[256], int u2b[324]) {
    for (int c = 0; c < 324; c++) u2b[c] = -1;
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        b2u[b] = keep ? b : 256 + n++;
        u2b[b2u[b]] = b;
    }
}

/* Length of the valid UTF-8 sequence at p (RFC 3629), or 0 when the byte at p starts none. */
static inline size_t zt_utf8_valid_len(const uint8_t *p, size_t avail, uint32_t *cp) {
    uint8_t c = p[0];
    if (c < 0x80) { if (cp) *cp = c; return 1; }
    if (c < 0xC2) return 0;
    if (c < 0xE0) {
        if (avail < 2 || (p[1] & 0xC0) != 0x80) return 0;
        if (cp) *cp = ((uint32_t)(c & 0x1F) << 6) | (p[1] & 0x3F);
        return 2;
    }
    if (c < 0xF0) {
        if (avail < 3 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80) return 0;
        if (c == 0xE0 && p[1] < 0xA0) return 0; /* overlong */
        if (c == 0xED && p[1] >= 0xA0) return 0; /* surrogate */
        if (cp) *cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(p[1] & 0x3F) << 6) | (p[2] & 0x3F);
        return 3;
    }
    if (c < 0xF5) {
        if (avail < 4 || (p[1] & 0xC0) != 0x80 || (p[2] & 0xC0) != 0x80 || (p[3] & 0xC0) != 0x80) return 0;
        if (c == 0xF0 && p[1] < 0x90) return 0; /* overlong */
        if (c == 0xF4 && p[1] >= 0x90) return 0; /* > U+10FFFF */
        if (cp)
            *cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(p[1] & 0x3F) << 12) | ((uint32_t)(p[2] & 0x3F) << 6) |
                  (p[3] & 0x3F);
        return 4;
    }
    return 0;
}

/* A string in the byte alphabet (UTF-8, N bytes) as bytes into OUT (room for N: a token never has
 * more bytes than characters); -1 with *BAD set to the first character outside the alphabet. */
static inline int zt_alphabet_bytes(const uint8_t *s, size_t n, const int u2b[324], uint8_t *out, size_t *n_out,
                                    uint32_t *bad) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        size_t l = zt_utf8_valid_len(s + i, n - i, &cp);
        if (!l || cp >= 324 || u2b[cp] < 0) {
            if (bad) *bad = l ? cp : 0xFFFD;
            return -1;
        }
        out[k++] = (uint8_t)u2b[cp];
        i += l;
    }
    *n_out = k;
    return 0;
}

static inline uint64_t zt_hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 1469598103934665603ull ^ n;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Sizes the vocabulary map for N_VOCAB tokens and the merge table for N_MERGES, both empty. */
static inline void zt_tok_tables(zt_tokenizer *t, size_t n_vocab, size_t n_merges) {
    size_t v = 1024, p = 1024;
    int shift = 10;
    while (v < 2 * n_vocab) v <<= 1;
    while (p < 2 * n_merges) p <<= 1, shift++;
    t->vmap = zt_xcalloc(v, sizeof *t->vmap);
    t->vmap_mask = v - 1;
    t->pairs = zt_xmalloc(p * sizeof *t->pairs);
    for (size_t i = 0; i < p; i++) t->pairs[i].key = UINT64_MAX;
    t->pair_mask = p - 1;
    t->pair_shift = (size_t)(64 - shift);
}

static inline size_t zt_pair_slot_of(const zt_tokenizer *t, uint64_t key) {
    return (size_t)((key * 0x9E3779B97F4A7C15ull) >> t->pair_shift);
}

static inline const pair_slot *zt_pair_find(const zt_tokenizer *t, int left, int right) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    for (size_t i = zt_pair_slot_of(t, key);; i = (i + 1) & t->pair_mask) {
        const pair_slot *s = &t->pairs[i];
        if (s->key == key) return s;
        if (s->key == UINT64_MAX) return NULL;
    }
}

/* Adds the merge LEFT RIGHT -> MERGED at RANK; returns 1 when the pair was there already (its rank
 * and result are then RANK's and MERGED's: Hugging Face's later rule wins), else 0. */
static inline int zt_pair_put(zt_tokenizer *t, int left, int right, int merged, int rank) {
    uint64_t key = ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
    size_t i = zt_pair_slot_of(t, key);
    while (t->pairs[i].key != UINT64_MAX && t->pairs[i].key != key) i = (i + 1) & t->pair_mask;
    int dup = t->pairs[i].key == key;
    t->pairs[i].key = key;
    t->pairs[i].rank = rank;
    t->pairs[i].merged = merged;
    return dup;
}

static inline int zt_vmap_find(const zt_tokenizer *t, const uint8_t *p, size_t n) {
    for (size_t i = zt_hash_bytes(p, n) & t->vmap_mask;; i = (i + 1) & t->vmap_mask) {
        uint32_t v = t->vmap[i];
        if (!v) return -1;
        int id = (int)v - 1;
        if (t->off[id + 1] - t->off[id] == n && memcmp(t->bytes + t->off[id], p, n) == 0) return id;
    }
}

static inline void zt_vmap_insert(zt_tokenizer *t, int id) {
    const uint8_t *p = t->bytes + t->off[id];
    size_t n = t->off[id + 1] - t->off[id];
    size_t i = zt_hash_bytes(p, n) & t->vmap_mask;
    while (t->vmap[i]) i = (i + 1) & t->vmap_mask;
    t->vmap[i] = (uint32_t)id + 1;
}

#endif
