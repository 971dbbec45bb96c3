/* tokenizer.c — see tokenizer.h */
#include "io/tokenizer.h"

#include "io/tokenizer_impl.h"
#include "util/json.h"

#include <sys/stat.h>
#include <utf8proc.h>
#include <unistd.h>


#define CACHE_MAX_PIECE 48
#define LINEAR_MAX_PIECE 48 /* longer pieces merge with a heap: O(n log n) instead of O(n^2) */
/* End of the run of valid UTF-8 starting at s (s itself when the byte there is invalid). */
static size_t valid_run_end(const uint8_t *s, size_t pos, size_t len) {
    while (pos < len) {
        while (pos + 8 <= len) { /* ASCII fast path */
            uint64_t w;
            memcpy(&w, s + pos, 8);
            if (w & 0x8080808080808080ull) break;
            pos += 8;
        }
        if (pos >= len) break;
        if (s[pos] < 0x80) { pos++; continue; }
        size_t k = zt_utf8_valid_len(s + pos, len - pos, NULL);
        if (!k) break;
        pos += k;
    }
    return pos;
}

/* Whether S[0..LEN) has a byte NFC could change (ZT_NFC_FIRST_LEAD or above). */
static int may_change_under_nfc(const uint8_t *s, size_t len) {
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        if (!(w & 0x8080808080808080ull)) continue; /* ASCII */
        for (size_t k = 0; k < 8; k++)
            if (s[i + k] >= ZT_NFC_FIRST_LEAD) return 1;
    }
    for (; i < len; i++)
        if (s[i] >= ZT_NFC_FIRST_LEAD) return 1;
    return 0;
}

/* Whether NFC leaves CP as it is whatever is around it, and never joins it to the character before
 * (so the text before it and from it on normalize apart): a starter without a decomposition that
 * is no mark (the second character of every composition is a mark, or a Hangul vowel or final
 * jamo). Below U+0300 every character is (ZT_NFC_FIRST_LEAD). */
static int nfc_inert(uint32_t cp) {
    if (cp < 0x300) return 1;
    if ((cp >= 0x1161 && cp <= 0x1175) || (cp >= 0x11A8 && cp <= 0x11C2)) return 0;
    const utf8proc_property_t *p = utf8proc_get_property((utf8proc_int32_t)cp);
    return p->combining_class == 0 && p->decomp_seqindex == UINT16_MAX && p->category != UTF8PROC_CATEGORY_MN &&
           p->category != UTF8PROC_CATEGORY_MC && p->category != UTF8PROC_CATEGORY_ME;
}

static void buf_append(uint8_t **buf, size_t *cap, size_t *n, const uint8_t *p, size_t len) {
    if (*n + len > *cap) *buf = zt_xrealloc(*buf, *cap = *n + len + (*n + len) / 2 + 64);
    memcpy(*buf + *n, p, len);
    *n += len;
}

/* Hugging Face's NFC normalizer (utf8proc's NFC) of S[0..LEN) appended to *BUF's first N bytes
 * (room grown to *CAP): each valid UTF-8 run normalized alone, each invalid byte kept where it is
 * (NFC ends a run with a whole character and starts one with a lead byte, so the invalid bytes
 * stay the same runs). Only what lies between inert characters (nfc_inert) goes through utf8proc,
 * with the inert character before it: the one it may compose with. Returns the new length. */
static size_t nfc_append(const uint8_t *s, size_t len, uint8_t **buf, size_t *cap, size_t n) {
    for (size_t pos = 0; pos < len;) {
        size_t end = valid_run_end(s, pos, len), done = pos, prev = pos;
        for (size_t i = may_change_under_nfc(s + pos, end - pos) ? pos : end; i < end;) {
            uint32_t cp = 0;
            if (s[i] < 0x80) { prev = i++; continue; }
            size_t l = zt_utf8_valid_len(s + i, end - i, &cp);
            if (nfc_inert(cp)) { prev = i; i += l; continue; }
            size_t from = i > pos ? prev : pos, to = i + l; /* [from, to): the inert character before, the rest up to the next */
            while (to < end && (l = zt_utf8_valid_len(s + to, end - to, &cp)) && !nfc_inert(cp)) to += l;
            buf_append(buf, cap, &n, s + done, from - done);
            uint8_t *nfc = NULL;
            utf8proc_ssize_t m = utf8proc_map(s + from, (utf8proc_ssize_t)(to - from), &nfc, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
            if (m < 0) abort(); /* a valid run: only out of memory fails */
            buf_append(buf, cap, &n, nfc, (size_t)m);
            free(nfc);
            done = prev = i = to;
        }
        buf_append(buf, cap, &n, s + done, end - done);
        if (end < len) buf_append(buf, cap, &n, s + end, 1); /* an invalid byte */
        pos = end + (end < len);
    }
    return n;
}

/* ---------------------------------------------------------------- loading */

static int load_encoder(zt_tokenizer *t, const char *path, const int u2b[324], zt_err *err) {
    zt_json root;
    if (zt_json_read_file_max(path, VOCAB_FILE_MAX_BYTES, &root, err)) return -1;
    uint32_t *klen = zt_xcalloc(ZT_GPT2_VOCAB_SIZE, sizeof *klen);
    uint32_t *kpos = zt_xcalloc(ZT_GPT2_VOCAB_SIZE, sizeof *kpos);
    size_t all_cap = 16;
    for (int i = 0; root.type == ZT_JSON_OBJECT && i < root.n; i++) all_cap += strlen(root.keys[i]);
    uint8_t *all = zt_xmalloc(all_cap); /* token bytes in file order */
    size_t all_n = 0;
    int rc = -1;
    if (root.type != ZT_JSON_OBJECT) {
        zt_fail(err, "%s:%d:%d: expected a JSON object of token -> id, got %s", path, root.line, root.col,
                zt_json_type_name(root.type));
        goto done;
    }
    for (int i = 0; i < root.n; i++) {
        const zt_json *v = &root.items[i];
        size_t kn = 0;
        uint32_t bad;
        if (!root.keys[i][0]) {
            zt_fail(err, "%s:%d:%d: empty token", path, v->key_line, v->key_col);
            goto done;
        }
        if (zt_alphabet_bytes((const uint8_t *)root.keys[i], strlen(root.keys[i]), u2b, all + all_n, &kn, &bad)) {
            zt_fail(err, "%s:%d:%d: token has character U+%04X, which is not in GPT-2's byte alphabet", path, v->key_line,
                    v->key_col, (unsigned)bad);
            goto done;
        }
        const char *bad_id = v->type != ZT_JSON_NUMBER ? "expected a token id (a non-negative integer)"
                             : v->is_uint && v->u < ZT_GPT2_VOCAB_SIZE ? NULL
                             : !v->is_uint && v->number >= 0 && v->number < ZT_GPT2_VOCAB_SIZE ? "token id is not an integer"
                                                                                                : "token id out of range";
        if (bad_id) {
            zt_fail(err, "%s:%d:%d: %s (ids are integers 0..%d)", path, v->line, v->col, bad_id, ZT_GPT2_VOCAB_SIZE - 1);
            goto done;
        }
        size_t id = (size_t)v->u;
        if (klen[id]) {
            zt_fail(err, "%s:%d:%d: token id %zu appears twice", path, v->line, v->col, id);
            goto done;
        }
        klen[id] = (uint32_t)kn;
        kpos[id] = (uint32_t)all_n;
        all_n += kn;
    }
    if (root.n != ZT_GPT2_VOCAB_SIZE) {
        int missing = 0;
        while (missing < ZT_GPT2_VOCAB_SIZE && klen[missing]) missing++;
        zt_fail(err, "%s: %d tokens, expected %d (GPT-2 ids 0..%d; id %d is missing)", path, root.n, ZT_GPT2_VOCAB_SIZE,
                ZT_GPT2_VOCAB_SIZE - 1, missing);
        goto done;
    }
    /* tokens in id order */
    t->n_vocab = ZT_GPT2_VOCAB_SIZE;
    t->off = zt_xmalloc((ZT_GPT2_VOCAB_SIZE + 1) * sizeof *t->off);
    t->bytes = zt_xmalloc(all_n + 1);
    size_t o = 0;
    for (int id = 0; id < ZT_GPT2_VOCAB_SIZE; id++) {
        t->off[id] = (uint32_t)o;
        memcpy(t->bytes + o, all + kpos[id], klen[id]);
        o += klen[id];
    }
    t->off[ZT_GPT2_VOCAB_SIZE] = (uint32_t)o;
    if (klen[ZT_TOKEN_EOT] != 13 || memcmp(t->bytes + t->off[ZT_TOKEN_EOT], "<|endoftext|>", 13) != 0) {
        zt_fail(err, "%s: id %d is not \"<|endoftext|>\" (not a GPT-2 vocabulary)", path, ZT_TOKEN_EOT);
        goto done;
    }
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    zt_tok_tables(t, ZT_GPT2_VOCAB_SIZE, 50000);
    for (int id = 0; id < ZT_TOKEN_EOT; id++) {
        const uint8_t *p = t->bytes + t->off[id];
        size_t n = t->off[id + 1] - t->off[id];
        if (zt_vmap_find(t, p, n) >= 0) {
            zt_fail(err, "%s: token id %d has the same bytes as id %d", path, id, zt_vmap_find(t, p, n));
            goto done;
        }
        zt_vmap_insert(t, id);
        if (n == 1) t->byte_id[p[0]] = id;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            zt_fail(err, "%s: no token for the single byte 0x%02X (not a byte-level BPE vocabulary)", path, b);
            goto done;
        }
    rc = 0;
done:
    free(klen);
    free(kpos);
    free(all);
    zt_json_free(&root);
    return rc;
}

/* Decodes one vocab.bpe token (GPT-2 alphabet, UTF-8) to bytes and looks up its id. */
static int merge_token_id(const zt_tokenizer *t, const uint8_t *s, size_t n, const int u2b[324], uint8_t *buf, size_t *bn) {
    if (zt_alphabet_bytes(s, n, u2b, buf, bn, NULL)) return -1;
    return zt_vmap_find(t, buf, *bn);
}

static int load_merges(zt_tokenizer *t, const char *path, const int u2b[324], zt_err *err) {
    size_t len;
    zt_err rerr;
    char *text = zt_read_file_max(path, VOCAB_FILE_MAX_BYTES, &len, &rerr);
    if (!text) return zt_fail(err, "%s", rerr.msg);
    if (len == 0) { free(text); return zt_fail(err, "%s: empty file (expected GPT-2 BPE merges)", path); }
    uint8_t buf[3][2048];
    size_t pos = 0, line = 0;
    int rank = 0, rc = -1;
    while (pos < len) {
        line++;
        const uint8_t *s = (const uint8_t *)text + pos;
        const uint8_t *nl = memchr(s, '\n', len - pos);
        size_t n = nl ? (size_t)(nl - s) : len - pos;
        pos += n + (nl ? 1 : 0);
        if (n && s[n - 1] == '\r') n--;
        if (n == 0) continue;
        if (line == 1 && s[0] == '#') continue; /* "#version: 0.2" */
        const uint8_t *sp = memchr(s, ' ', n);
        size_t la = sp ? (size_t)(sp - s) : 0, lb = sp ? n - la - 1 : 0;
        if (!sp || la == 0 || lb == 0 || memchr(sp + 1, ' ', lb) || la > 1000 || lb > 1000) {
            zt_fail(err, "%s:%zu: expected a merge rule \"LEFT RIGHT\"", path, line);
            goto done;
        }
        size_t na = 0, nb = 0;
        int a = merge_token_id(t, s, la, u2b, buf[0], &na);
        int b = merge_token_id(t, sp + 1, lb, u2b, buf[1], &nb);
        if (a < 0 || b < 0) {
            zt_fail(err, "%s:%zu: merge names a token not in encoder.json (\"%.*s\")", path, line, (int)(a < 0 ? la : lb),
                    (const char *)(a < 0 ? s : sp + 1));
            goto done;
        }
        memcpy(buf[2], buf[0], na);
        memcpy(buf[2] + na, buf[1], nb);
        int m = zt_vmap_find(t, buf[2], na + nb);
        if (m < 0) {
            zt_fail(err, "%s:%zu: the merged token \"%.*s%.*s\" is not in encoder.json", path, line, (int)la, (const char *)s,
                    (int)lb, (const char *)(sp + 1));
            goto done;
        }
        if (rank >= (int)(t->pair_mask + 1) / 2) { zt_fail(err, "%s:%zu: too many merge rules", path, line); goto done; }
        if (zt_pair_put(t, a, b, m, rank++)) { zt_fail(err, "%s:%zu: duplicate merge rule", path, line); goto done; }
    }
    if (rank == 0) { zt_fail(err, "%s: no merge rules", path); goto done; }
    rc = 0;
done:
    free(text);
    return rc;
}

int zt_tokenizer_vocab_size(const zt_tokenizer *t) { return t->n_vocab; }

int zt_tokenizer_eot(const zt_tokenizer *t) { return t->eot; }

void zt_tokenizer_free(zt_tokenizer *t) {
    if (!t) return;
    free(t->off);
    free(t->bytes);
    free(t->vmap);
    free(t->pairs);
    free(t->added);
    free(t->pattern);
    if (t->re) pcre2_code_free(t->re);
    if (t->letter_digit) pcre2_code_free(t->letter_digit);
    free(t);
}

/* GPT-2's encoder.json and vocab.bpe in DIR. */
static int load_gpt2_files(zt_tokenizer *t, const char *dir, zt_err *err) {
    int b2u[256], u2b[324];
    zt_byte_alphabet(b2u, u2b);
    size_t dl = strlen(dir);
    char *path = zt_xmalloc(dl + 32);
    snprintf(path, dl + 32, "%s/encoder.json", dir);
    int rc = load_encoder(t, path, u2b, err);
    snprintf(path, dl + 32, "%s/vocab.bpe", dir);
    if (!rc) rc = load_merges(t, path, u2b, err);
    free(path);
    t->eot = ZT_TOKEN_EOT;
    t->pattern = zt_xstrdup(ZT_GPT2_PATTERN);
    t->anchored = 1;
    t->cuts = ZT_CUTS_GPT2;
    return rc;
}

zt_tokenizer *zt_tokenizer_load(const char *path, zt_err *err) {
    zt_tokenizer *t = zt_xcalloc(1, sizeof *t);
    t->eot = -1;
    /* a folder (or a missing path not named *.json): its tokenizer.json, else GPT-2's two files */
    struct stat st;
    size_t pl = strlen(path);
    int is_file = stat(path, &st) == 0 ? !S_ISDIR(st.st_mode) : pl >= 5 && !strcmp(path + pl - 5, ".json");
    char *json = is_file ? zt_xstrdup(path) : zt_xmalloc(pl + 32);
    if (!is_file) snprintf(json, pl + 32, "%s/tokenizer.json", path);
    int rc = !is_file && access(json, F_OK) != 0 ? load_gpt2_files(t, path, err) : zt_tokenizer_json_fill(t, json, err);
    free(json);
    if (rc) goto fail;
    int ecode;
    PCRE2_SIZE eoff;
    if (t->pattern) {
        t->re = pcre2_compile((PCRE2_SPTR)t->pattern, PCRE2_ZERO_TERMINATED,
                              PCRE2_UTF | PCRE2_UCP | (t->anchored ? PCRE2_ANCHORED : 0), &ecode, &eoff, NULL);
        if (!t->re) {
            PCRE2_UCHAR buf[256];
            pcre2_get_error_message(ecode, buf, sizeof buf);
            zt_fail(err, "%s: cannot compile the pre-tokenizer's regex at offset %zu: %s", path, (size_t)eoff, (const char *)buf);
            goto fail;
        }
        t->jit = pcre2_jit_compile(t->re, PCRE2_JIT_COMPLETE) == 0;
    }
    t->letter_digit = pcre2_compile((PCRE2_SPTR) "(\\p{L})|\\p{N}", PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED,
                                    &ecode, &eoff, NULL);
    if (!t->letter_digit) abort(); /* a constant pattern */
    return t;
fail:
    zt_tokenizer_free(t);
    return NULL;
}

/* ---------------------------------------------------------------- encoding */

void zt_ids_push(zt_ids *ids, int id) {
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 256;
        ids->data = zt_xrealloc(ids->data, cap * sizeof *ids->data);
        ids->cap = cap;
    }
    ids->data[ids->n++] = id;
}

void zt_ids_free(zt_ids *ids) {
    free(ids->data);
    ids->data = NULL;
    ids->n = ids->cap = 0;
}

typedef struct cache_slot {
    uint64_t hash; /* 0 = empty */
    uint32_t piece_off, ids_off;
    uint16_t piece_len, n_ids;
} cache_slot;

typedef struct enc_ws {
    /* piece -> ids cache for this call */
    cache_slot *slots;
    size_t mask, used;
    uint8_t *cbytes;
    int *cids;
    size_t cbytes_n, cids_n, carena; /* both arenas hold carena entries */
    /* BPE scratch */
    int *sym, *prev, *next;
    uint64_t *heap;
    size_t cap, heap_cap;
} enc_ws;

/* The cache holds at most 65536 pieces (slots, piece bytes and ids together about 3.5 MiB) and
 * starts over when full, so an encoder's memory is bounded whatever it encodes. */
static void ws_init(enc_ws *w, size_t text_len) {
    memset(w, 0, sizeof *w);
    size_t slots = 1024;
    while (slots < 65536 && slots < text_len / 4) slots <<= 1;
    w->slots = zt_xcalloc(slots, sizeof *w->slots);
    w->mask = slots - 1;
    w->carena = slots * 8;
    w->cbytes = zt_xmalloc(w->carena);
    w->cids = zt_xmalloc(w->carena * sizeof *w->cids);
}

static void ws_free(enc_ws *w) {
    free(w->slots);
    free(w->cbytes);
    free(w->cids);
    free(w->sym);
    free(w->prev);
    free(w->next);
    free(w->heap);
}

static void ws_reserve(enc_ws *w, size_t n) {
    if (n <= w->cap) return;
    size_t cap = w->cap ? w->cap : 64;
    while (cap < n) cap *= 2;
    free(w->sym);
    free(w->prev);
    free(w->next);
    w->sym = zt_xmalloc(cap * sizeof *w->sym);
    w->prev = zt_xmalloc(cap * sizeof *w->prev);
    w->next = zt_xmalloc(cap * sizeof *w->next);
    w->cap = cap;
}

static inline void heap_push(enc_ws *w, size_t *hn, uint64_t key) {
    if (*hn == w->heap_cap) {
        w->heap_cap = w->heap_cap ? w->heap_cap * 2 : 256;
        w->heap = zt_xrealloc(w->heap, w->heap_cap * sizeof *w->heap);
    }
    uint64_t *h = w->heap;
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (h[p] <= key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = key;
}

static inline uint64_t heap_pop(enc_ws *w, size_t *hn) {
    uint64_t *h = w->heap;
    uint64_t top = h[0], last = h[--(*hn)];
    size_t n = *hn, i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && h[c + 1] < h[c]) c++;
        if (h[c] >= last) break;
        h[i] = h[c];
        i = c;
    }
    if (n) h[i] = last;
    return top;
}

/* BPE of one piece into w->sym; returns the number of ids. */
static size_t bpe(const zt_tokenizer *t, enc_ws *w, const uint8_t *p, size_t n) {
    ws_reserve(w, n);
    int *sym = w->sym;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_id[p[i]];
    if (n <= LINEAR_MAX_PIECE) {
        /* encoder.py's loop: merge every occurrence of the lowest-ranked adjacent pair, left to right */
        size_t m = n;
        while (m > 1) {
            int best = INT32_MAX, merged = -1, L = -1, R = -1;
            for (size_t i = 0; i + 1 < m; i++) {
                const pair_slot *s = zt_pair_find(t, sym[i], sym[i + 1]);
                if (s && s->rank < best) { best = s->rank; merged = s->merged; L = sym[i]; R = sym[i + 1]; }
            }
            if (merged < 0) break;
            size_t k = 0;
            for (size_t i = 0; i < m;) {
                if (i + 1 < m && sym[i] == L && sym[i + 1] == R) { sym[k++] = merged; i += 2; }
                else sym[k++] = sym[i++];
            }
            m = k;
        }
        return m;
    }
    /* Long pieces: the same merges in the same order from a heap keyed by (rank, position). Every
     * pair created by a merge ranks after the merge that created it (true of GPT-2's vocab.bpe),
     * so popping the lowest (rank, position) merges exactly what encoder.py merges. */
    int *prev = w->prev, *next = w->next;
    size_t hn = 0;
    for (size_t i = 0; i < n; i++) {
        prev[i] = (int)i - 1;
        next[i] = i + 1 < n ? (int)i + 1 : -1;
    }
    for (size_t i = 0; i + 1 < n; i++) {
        const pair_slot *s = zt_pair_find(t, sym[i], sym[i + 1]);
        if (s) heap_push(w, &hn, ((uint64_t)s->rank << 32) | i);
    }
    while (hn) {
        uint64_t key = heap_pop(w, &hn);
        int rank = (int)(key >> 32), i = (int)(uint32_t)key;
        if (sym[i] < 0 || next[i] < 0) continue;
        int j = next[i];
        const pair_slot *s = zt_pair_find(t, sym[i], sym[j]);
        if (!s || s->rank != rank) continue; /* stale */
        sym[i] = s->merged;
        sym[j] = -1;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (prev[i] >= 0) {
            const pair_slot *q = zt_pair_find(t, sym[prev[i]], sym[i]);
            if (q) heap_push(w, &hn, ((uint64_t)q->rank << 32) | (uint32_t)prev[i]);
        }
        if (next[i] >= 0) {
            const pair_slot *q = zt_pair_find(t, sym[i], sym[next[i]]);
            if (q) heap_push(w, &hn, ((uint64_t)q->rank << 32) | (uint32_t)i);
        }
    }
    size_t m = 0;
    for (int i = 0; i >= 0; i = next[i]) sym[m++] = sym[i];
    return m;
}

static void encode_piece(const zt_tokenizer *t, enc_ws *w, const uint8_t *p, size_t n, zt_ids *out) {
    if (t->ignore_merges) {
        int id = zt_vmap_find(t, p, n);
        if (id >= 0) { zt_ids_push(out, id); return; }
    }
    if (n == 1) {
        zt_ids_push(out, t->byte_id[p[0]]);
        return;
    }
    uint64_t h = 0;
    size_t slot = 0;
    if (n <= CACHE_MAX_PIECE) {
        h = zt_hash_bytes(p, n) | 1;
        for (slot = h & w->mask;; slot = (slot + 1) & w->mask) {
            cache_slot *c = &w->slots[slot];
            if (!c->hash) break;
            if (c->hash == h && c->piece_len == n && memcmp(w->cbytes + c->piece_off, p, n) == 0) {
                for (size_t i = 0; i < c->n_ids; i++) zt_ids_push(out, w->cids[c->ids_off + i]);
                return;
            }
        }
    }
    size_t m = bpe(t, w, p, n);
    for (size_t i = 0; i < m; i++) zt_ids_push(out, w->sym[i]);
    if (n <= CACHE_MAX_PIECE) {
        if (w->used * 2 >= w->mask + 1 || w->cbytes_n + n > w->carena || w->cids_n + m > w->carena) {
            memset(w->slots, 0, (w->mask + 1) * sizeof *w->slots); /* full: start over */
            w->used = w->cbytes_n = w->cids_n = 0;
            for (slot = h & w->mask; w->slots[slot].hash; slot = (slot + 1) & w->mask) {}
        }
        cache_slot *c = &w->slots[slot];
        c->hash = h;
        c->piece_off = (uint32_t)w->cbytes_n;
        c->piece_len = (uint16_t)n;
        c->ids_off = (uint32_t)w->cids_n;
        c->n_ids = (uint16_t)m;
        memcpy(w->cbytes + w->cbytes_n, p, n);
        memcpy(w->cids + w->cids_n, w->sym, m * sizeof *w->sym);
        w->cbytes_n += n;
        w->cids_n += m;
        w->used++;
    }
}

struct zt_encoder {
    const zt_tokenizer *tok;
    enc_ws ws;
    pcre2_match_data *md;
    uint8_t *nfc; /* the normalized text of the part encode_pass is on */
    size_t nfc_cap;
};

static zt_encoder *encoder_new(const zt_tokenizer *t, size_t text_len) {
    zt_encoder *e = zt_xmalloc(sizeof *e);
    e->tok = t;
    e->nfc = NULL;
    e->nfc_cap = 0;
    ws_init(&e->ws, text_len);
    e->md = pcre2_match_data_create_from_pattern(t->re, NULL);
    if (!e->md) abort();
    return e;
}

zt_encoder *zt_encoder_new(const zt_tokenizer *t) { return encoder_new(t, SIZE_MAX); }

void zt_encoder_free(zt_encoder *e) {
    if (!e) return;
    pcre2_match_data_free(e->md);
    ws_free(&e->ws);
    free(e->nfc);
    free(e);
}

int zt_tokenizer_encode(const zt_tokenizer *t, const char *text, size_t len, zt_ids *out, zt_err *err) {
    if (len == 0) return 0;
    zt_encoder *e = encoder_new(t, len);
    int rc = zt_encoder_encode(e, text, len, out, err);
    zt_encoder_free(e);
    return rc;
}

/* Pre-tokenizes and encodes S[0..LEN), which holds no added token. The pattern's pieces, and with
 * an unanchored pattern (Hugging Face's Split, "Isolated") the text between them, are pieces. */
static int encode_plain(zt_encoder *e, const uint8_t *s, size_t len, zt_ids *out, zt_err *err) {
    const zt_tokenizer *t = e->tok;
    enc_ws *w = &e->ws;
    pcre2_match_data *md = e->md;
    uint32_t opts = PCRE2_NO_UTF_CHECK | (t->anchored ? 0 : PCRE2_NOTEMPTY);
    const PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md); /* md's: the same pointer for every match */
    size_t pos = 0;
    while (pos < len) {
        size_t end = valid_run_end(s, pos, len);
        const uint8_t *sub = s + pos;
        size_t slen = end - pos, off = 0;
        while (off < slen) {
            size_t start = off, stop = slen;
            if (t->re) {
                int r = t->jit ? pcre2_jit_match(t->re, sub, slen, off, opts, md, NULL) : -1;
                if (!t->jit || r == PCRE2_ERROR_JIT_STACKLIMIT) r = pcre2_match(t->re, sub, slen, off, opts, md, NULL);
                if (r > 0) {
                    start = ov[0];
                    stop = ov[1];
                } else if (r == PCRE2_ERROR_NOMATCH) {
                    start = stop = t->anchored ? off : slen; /* anchored: cannot happen (GPT-2's covers every character) */
                } else {
                    PCRE2_UCHAR buf[256];
                    pcre2_get_error_message(r, buf, sizeof buf);
                    return zt_fail(err, "tokenizer: regex match failed at byte %zu: %s", pos + off, (const char *)buf);
                }
            }
            if (start > off) encode_piece(t, w, sub + off, start - off, out);
            if (stop <= start && start < slen) stop = start + zt_utf8_valid_len(sub + start, slen - start, NULL);
            if (stop > start) encode_piece(t, w, sub + start, stop - start, out);
            off = stop > off ? stop : slen;
        }
        pos = end;
        if (pos < len) zt_ids_push(out, t->byte_id[s[pos++]]); /* an invalid byte: its own piece */
    }
    return 0;
}

/* The leftmost, then longest, added token with this NORMALIZED flag in S[0..LEN) (Hugging Face's
 * leftmost-longest match): its index in t->added with *AT its offset, or -1. */
static int find_added(const zt_tokenizer *t, const uint8_t *s, size_t len, int normalized, size_t *at) {
    for (size_t i = 0; i < len; i++) {
        if (!t->added_first[s[i]]) continue;
        for (int k = 0; k < t->n_added; k++) { /* longest first: the first that matches is the longest */
            const zt_added_token *a = &t->added[k];
            if (a->normalized == normalized && a->len <= len - i && memcmp(s + i, t->bytes + t->off[a->id], a->len) == 0) {
                *at = i;
                return k;
            }
        }
    }
    return -1;
}

/* Pass 0 splits off the added tokens matched on the raw text (normalized: false), pass 1
 * normalizes what is between them (NFC, or nothing without a normalizer) and splits off those
 * matched on the normalized text, pass 2 pre-tokenizes: tokenizers' AddedVocabulary order. */
static int encode_pass(zt_encoder *e, const uint8_t *s, size_t len, int pass, zt_ids *out, zt_err *err) {
    const zt_tokenizer *t = e->tok;
    if (pass == 0 && !t->n_added) pass = 1; /* nothing to split off the raw text */
    if (pass == 1 && t->nfc && may_change_under_nfc(s, len)) {
        len = nfc_append(s, len, &e->nfc, &e->nfc_cap, 0);
        s = e->nfc; /* pass 2 reads it; the next pass 1 rewrites it */
    }
    if (pass == 2 || !t->n_added) return encode_plain(e, s, len, out, err);
    while (len) {
        size_t at = len;
        int k = find_added(t, s, len, pass, &at);
        if (at && encode_pass(e, s, at, pass + 1, out, err)) return -1;
        if (k < 0) break;
        zt_ids_push(out, t->added[k].id);
        s += at + t->added[k].len;
        len -= at + t->added[k].len;
    }
    return 0;
}

int zt_encoder_encode(zt_encoder *e, const char *text, size_t len, zt_ids *out, zt_err *err) {
    return encode_pass(e, (const uint8_t *)text, len, 0, out, err);
}

/* ---------------------------------------------------------------- cuts for encoding block by block */

/* A character's class as ZT_GPT2_PATTERN sees it: \s (White_Space), \p{L}, \p{N}, or the rest. */
enum { CH_SPACE, CH_LETTER, CH_DIGIT, CH_OTHER };

static int is_white_space(uint32_t c) { /* ZT_TOK_WS */
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int char_class(const zt_tokenizer *t, const uint8_t *p, size_t n, uint32_t cp, pcre2_match_data **md) {
    if (is_white_space(cp)) return CH_SPACE;
    if (cp < 0x80) return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z' ? CH_LETTER : cp >= '0' && cp <= '9' ? CH_DIGIT : CH_OTHER;
    if (!*md && !(*md = pcre2_match_data_create_from_pattern(t->letter_digit, NULL))) abort();
    int r = pcre2_match(t->letter_digit, p, n, 0, PCRE2_NO_UTF_CHECK, *md, NULL);
    return r == 2 ? CH_LETTER : r == 1 ? CH_DIGIT : CH_OTHER; /* 2: group 1, \p{L}, matched */
}

size_t zt_tokenizer_cut_reach(const zt_tokenizer *t) { return t->added_max > 4 ? t->added_max : 4; }

/* Whether an added token's occurrence in S[0..LEN) would cover both sides of A; only those
 * with "normalized" NORMALIZED, or (-1) all. */
static int added_spans(const zt_tokenizer *t, const uint8_t *s, size_t len, size_t a, int normalized) {
    for (int k = 0; k < t->n_added; k++) {
        const zt_added_token *tk = &t->added[k];
        if (normalized >= 0 && tk->normalized != normalized) continue;
        for (size_t b = a >= tk->len - 1 ? a - (tk->len - 1) : 0; b < a && b + tk->len <= len; b++)
            if (memcmp(s + b, t->bytes + t->off[tk->id], tk->len) == 0) return 1;
    }
    return 0;
}

/* With NFC, whether the cut at A (a White_Space character there: a starter NFC never joins to
 * what is before, so the two sides normalize apart) holds on the normalized text too: the
 * character before it there is still a letter (NFC may compose it with the one before, or split
 * it: U+0958 becomes U+0915 U+093C, a mark) for the letter-space cut, and no "normalized" added
 * token spans it. A window of 32 bytes and two added tokens before A is normalized: the last
 * character's composition reaches back one starter. */
static int nfc_cut_holds(const zt_tokenizer *t, const uint8_t *s, size_t len, size_t a, pcre2_match_data **md) {
    size_t back = 32 + 2 * (size_t)t->added_max, w = a > back ? a - back : 0, cap = 0;
    while (w < a && (s[w] & 0xC0) == 0x80) w++;
    uint8_t *buf = NULL;
    size_t nb = nfc_append(s + w, a - w, &buf, &cap, 0), j = nb ? nb - 1 : 0;
    while (j > 0 && (buf[j] & 0xC0) == 0x80) j--;
    uint32_t cp = 0;
    size_t cl = nb ? zt_utf8_valid_len(buf + j, nb - j, &cp) : 0;
    int ok = t->cuts != ZT_CUTS_LETTER_SPACE || (cl && char_class(t, buf + j, cl, cp, md) == CH_LETTER);
    if (ok) {
        size_t after = len - a < zt_tokenizer_cut_reach(t) ? len - a : zt_tokenizer_cut_reach(t);
        size_t n = nfc_append(s + a, after, &buf, &cap, nb);
        ok = !added_spans(t, buf, n, nb, 1);
    }
    free(buf);
    return ok;
}

/* Why these cuts are exact (see tokenizer.h): every piece of ZT_GPT2_PATTERN is either all White_Space
 * or an optional U+0020 and then characters of one class (letters, digits, or the rest), except
 * the contractions, an apostrophe and letters. So a non-space character followed by a space
 * character, or by a character of another class (but not an apostrophe followed by a letter), are
 * always in different pieces; the pattern has no lookbehind and its one lookahead, (?!\S), ends
 * only whitespace pieces, so the pieces on either side of such a cut are the same whether the text
 * goes on or stops there. An invalid byte on either side ends a run of valid UTF-8 there anyway.
 * Llama 3's and Qwen2's patterns join a non-letter to the letters after it and cut digit runs in
 * groups, but no piece of theirs holds a letter and then White_Space, so that is their cut. An
 * added token's text is split off first; a cut never falls inside one. With an NFC normalizer a
 * cut is only before White_Space, and it must hold on the normalized text too (nfc_cut_holds). */
size_t zt_tokenizer_last_cut(const zt_tokenizer *t, const char *text, size_t from, size_t len) {
    const uint8_t *s = (const uint8_t *)text;
    pcre2_match_data *md = NULL;
    size_t cut = 0, reach = zt_tokenizer_cut_reach(t);
    for (size_t a = len >= reach ? len - reach : 0; a >= from && a > 0; a--) {
        if ((s[a] & 0xC0) == 0x80) continue; /* inside a character */
        size_t j = a - 1;                    /* where the character before a starts */
        while (j > 0 && a - j < 4 && (s[j] & 0xC0) == 0x80) j--;
        uint32_t prev_cp = 0, next_cp = 0;
        size_t prev_len = zt_utf8_valid_len(s + j, len - j, &prev_cp), next_len = zt_utf8_valid_len(s + a, len - a, &next_cp);
        int ok = prev_len != a - j || next_len == 0; /* an invalid byte on one side */
        if (!ok && t->cuts != ZT_CUTS_NONE) {
            int pc = char_class(t, s + j, prev_len, prev_cp, &md), nc = char_class(t, s + a, next_len, next_cp, &md);
            ok = t->cuts == ZT_CUTS_GPT2 /* with NFC only before White_Space: a mark may join the character before */
                     ? pc != CH_SPACE && (nc == CH_SPACE || (!t->nfc && nc != pc && !(prev_cp == '\'' && nc == CH_LETTER)))
                     : pc == CH_LETTER && nc == CH_SPACE;
            if (ok && t->nfc) ok = nfc_cut_holds(t, s, len, a, &md);
        }
        if (ok && !added_spans(t, s, len, a, -1)) { cut = a; break; }
    }
    if (md) pcre2_match_data_free(md);
    return cut;
}

/* ---------------------------------------------------------------- decoding */

const char *zt_tokenizer_token_bytes(const zt_tokenizer *t, int id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) {
        *len = 0;
        return NULL;
    }
    *len = t->off[id + 1] - t->off[id];
    return (const char *)t->bytes + t->off[id];
}

size_t zt_tokenizer_decode(const zt_tokenizer *t, const int *ids, size_t n, char *out, size_t cap) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l;
        const char *b = zt_tokenizer_token_bytes(t, ids[i], &l);
        if (l && total < cap) memcpy(out + total, b, l < cap - total ? l : cap - total);
        total += l;
    }
    return total;
}

char *zt_tokenizer_decode_alloc(const zt_tokenizer *t, const int *ids, size_t n, size_t *len) {
    size_t need = zt_tokenizer_decode(t, ids, n, NULL, 0);
    char *out = zt_xmalloc(need + 1);
    zt_tokenizer_decode(t, ids, n, out, need);
    out[need] = 0;
    if (len) *len = need;
    return out;
}
