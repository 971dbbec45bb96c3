/* tokenizer_json.c — a Hugging Face tokenizer.json of byte-level BPE (GPT-2, Llama 3, Qwen2 style)
 * into the tables tokenizer.c encodes with (tokenizer_impl.h).
 *
 * Accepted: "model" {"type": "BPE", "vocab": {token: id}, "merges": ["a b", ...] or [["a", "b"], ...],
 * "ignore_merges", no dropout, no byte_fallback, no subword prefix or suffix}; "added_tokens"
 * (special or not, "normalized" either way, no lstrip/rstrip/single_word); "normalizer" null, NFC
 * or a Sequence of NFC alone (Qwen2's; a "normalized" added token's content must be NFC already);
 * "pre_tokenizer" ByteLevel (add_prefix_space false) or Sequence [Split {Regex, "Isolated"},
 * ByteLevel {use_regex false}]; "decoder" ByteLevel or null. "post_processor" is not applied (ids
 * are Hugging Face's with add_special_tokens=False). Anything else is refused with one line naming
 * the file, where, and what is unsupported: a tokenizer that encoded differently than Hugging
 * Face's would train a model on the wrong ids without a word. */
#include "io/tokenizer_impl.h"
#include "util/json.h"

#include <utf8proc.h>

/* The Split regexes Llama 3 and Qwen2 ship, as tokenizer.json spells them: they get cuts */
static const char *const LETTER_SPACE_CUT_PATTERNS[] = {
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
};

static const char *type_of(const zt_json *v) {
    const zt_json *ty = zt_json_get(v, "type");
    return ty && ty->type == ZT_JSON_STRING ? ty->str : NULL;
}

static int flag(const zt_json *obj, const char *key) {
    const zt_json *v = zt_json_get(obj, key);
    return v && v->type == ZT_JSON_BOOL && v->boolean;
}

/* Hugging Face's (Oniguruma's) \s and \S as Unicode White_Space, like GPT-2's pattern here; NULL
 * for a \S inside a character class (which no shipped pattern has). */
static char *white_space_pattern(const char *re) {
    zt_sb b = {0};
    int in_class = 0;
    for (const char *p = re; *p; p++) {
        if (*p == '\\' && p[1]) {
            p++;
            if (*p == 's') zt_sb_printf(&b, in_class ? "%s" : "[%s]", ZT_TOK_WS);
            else if (*p == 'S' && !in_class) zt_sb_printf(&b, "[^%s]", ZT_TOK_WS);
            else if (*p == 'S') { free(b.p); return NULL; }
            else zt_sb_printf(&b, "\\%c", *p);
            continue;
        }
        if (*p == '[' && !in_class) in_class = 1;
        else if (*p == ']' && in_class) in_class = 0;
        zt_sb_printf(&b, "%c", *p);
    }
    return b.p ? b.p : zt_xstrdup("");
}

static int unsupported(zt_err *err, const char *path, const zt_json *v, const char *what, const char *name) {
    return zt_fail(err, "%s:%d:%d: unsupported %s%s%s (supported: byte-level BPE as GPT-2, Llama 3 and Qwen2 ship it)", path,
                   v->line, v->col, what, name ? " " : "", name ? name : "");
}

static int byte_level_ok(const zt_json *bl, const char *path, zt_err *err) {
    if (flag(bl, "add_prefix_space")) return unsupported(err, path, bl, "ByteLevel option", "add_prefix_space: true");
    return 0;
}

static int load_pre_tokenizer(zt_tokenizer *t, const zt_json *pre, const char *path, zt_err *err) {
    const char *ty = pre ? type_of(pre) : NULL;
    if (!pre || pre->type != ZT_JSON_OBJECT || !ty) {
        return zt_fail(err, "%s:%d:%d: pre_tokenizer: expected an object with a \"type\" (ByteLevel or Sequence)", path,
                       pre ? pre->line : 1, pre ? pre->col : 1);
    }
    if (!strcmp(ty, "ByteLevel")) {
        if (byte_level_ok(pre, path, err)) return -1;
        const zt_json *use_regex = zt_json_get(pre, "use_regex");
        if (!use_regex || use_regex->type != ZT_JSON_BOOL || use_regex->boolean) {
            t->pattern = zt_xstrdup(ZT_GPT2_PATTERN);
            t->anchored = 1;
            t->cuts = ZT_CUTS_GPT2;
        } else {
            t->cuts = ZT_CUTS_NONE; /* each valid run is one piece */
        }
        return 0;
    }
    if (strcmp(ty, "Sequence")) return unsupported(err, path, pre, "pre_tokenizer", ty);
    const zt_json *seq = zt_json_get(pre, "pretokenizers");
    if (!seq || seq->type != ZT_JSON_ARRAY || seq->n != 2 || !type_of(&seq->items[0]) || !type_of(&seq->items[1]) ||
        strcmp(type_of(&seq->items[0]), "Split") || strcmp(type_of(&seq->items[1]), "ByteLevel"))
        return unsupported(err, path, seq ? seq : pre, "pre_tokenizer Sequence", "(supported: [Split, ByteLevel])");
    const zt_json *split = &seq->items[0], *bl = &seq->items[1];
    if (byte_level_ok(bl, path, err)) return -1;
    const zt_json *use_regex = zt_json_get(bl, "use_regex");
    if (!use_regex || use_regex->type != ZT_JSON_BOOL || use_regex->boolean)
        return unsupported(err, path, bl, "ByteLevel after a Split", "with use_regex: true");
    const zt_json *pat = zt_json_get(split, "pattern"), *behavior = zt_json_get(split, "behavior");
    const zt_json *regex = zt_json_get(pat, "Regex");
    if (!regex || regex->type != ZT_JSON_STRING) return unsupported(err, path, pat ? pat : split, "Split pattern", "(only {\"Regex\": ...})");
    if (!behavior || behavior->type != ZT_JSON_STRING || strcmp(behavior->str, "Isolated"))
        return unsupported(err, path, behavior ? behavior : split, "Split behavior", behavior && behavior->str ? behavior->str : NULL);
    if (flag(split, "invert")) return unsupported(err, path, split, "Split option", "invert: true");
    t->pattern = white_space_pattern(regex->str);
    if (!t->pattern) return unsupported(err, path, regex, "regex", "(\\S inside a character class)");
    t->cuts = ZT_CUTS_NONE;
    for (size_t i = 0; i < sizeof LETTER_SPACE_CUT_PATTERNS / sizeof *LETTER_SPACE_CUT_PATTERNS; i++)
        if (!strcmp(regex->str, LETTER_SPACE_CUT_PATTERNS[i])) t->cuts = ZT_CUTS_LETTER_SPACE;
    return 0;
}

/* "normalizer": null, NFC (Qwen2's), or a Sequence holding only NFC. */
static int load_normalizer(zt_tokenizer *t, const zt_json *norm, const char *path, zt_err *err) {
    if (!norm || norm->type == ZT_JSON_NULL) return 0;
    const char *ty = type_of(norm);
    const zt_json *seq = ty && !strcmp(ty, "Sequence") ? zt_json_get(norm, "normalizers") : NULL;
    if (seq && seq->type == ZT_JSON_ARRAY && seq->n == 1) norm = &seq->items[0], ty = type_of(norm);
    else if (seq) return unsupported(err, path, seq, "normalizer Sequence", "(supported: [NFC])");
    if (!ty || strcmp(ty, "NFC")) return unsupported(err, path, norm, "normalizer", ty);
    t->nfc = 1;
    return 0;
}

/* The parts beside the model: only what Hugging Face's byte-level BPE has there. */
static int check_pipeline(zt_tokenizer *t, const zt_json *root, const char *path, zt_err *err) {
    if (load_normalizer(t, zt_json_get(root, "normalizer"), path, err)) return -1;
    const zt_json *dec = zt_json_get(root, "decoder");
    if (dec && dec->type != ZT_JSON_NULL && (!type_of(dec) || strcmp(type_of(dec), "ByteLevel")))
        return unsupported(err, path, dec, "decoder", type_of(dec));
    const zt_json *model = zt_json_get(root, "model");
    if (!model || model->type != ZT_JSON_OBJECT) return zt_fail(err, "%s: missing key \"model\" (an object)", path);
    const char *mt = type_of(model);
    if (!mt || strcmp(mt, "BPE")) return unsupported(err, path, model, "model type", mt ? mt : "(none)");
    if (flag(model, "byte_fallback")) return unsupported(err, path, model, "BPE option", "byte_fallback: true");
    const zt_json *dropout = zt_json_get(model, "dropout");
    if (dropout && dropout->type != ZT_JSON_NULL) return unsupported(err, path, dropout, "BPE option", "dropout");
    const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int i = 0; i < 2; i++) {
        const zt_json *v = zt_json_get(model, affix[i]);
        if (v && v->type == ZT_JSON_STRING && v->str_len) return unsupported(err, path, v, "BPE option", affix[i]);
    }
    return 0;
}

static int is_nfc(const zt_json *s) {
    uint8_t *nfc = utf8proc_NFC((const uint8_t *)s->str);
    int same = nfc && !strcmp((const char *)nfc, s->str);
    free(nfc);
    return same;
}

static int by_length_desc(const void *a, const void *b) {
    const zt_added_token *x = a, *y = b;
    return x->len < y->len ? 1 : x->len > y->len ? -1 : x->id - y->id;
}

/* the largest id taken (Gemma's vocabulary is 256000): a stray huge id is one line, not a huge allocation */
#define MAX_TOKEN_ID ((1 << 24) - 1)

/* An id: a JSON integer in [0, MAX_TOKEN_ID]. */
static int json_id(const zt_json *v, const char *path, const char *what, zt_err *err) {
    if (v && v->type == ZT_JSON_NUMBER && v->is_uint && v->u <= MAX_TOKEN_ID) return (int)v->u;
    if (!v) return zt_fail(err, "%s: %s: missing \"id\"", path, what);
    return zt_fail(err, "%s:%d:%d: %s: expected a token id (an integer 0..%d)", path, v->line, v->col, what, MAX_TOKEN_ID);
}

/* A merge's two tokens: "LEFT RIGHT" or ["LEFT", "RIGHT"]. */
static int merge_parts(const zt_json *m, const char **l, size_t *ll, const char **r, size_t *rl) {
    if (m->type == ZT_JSON_ARRAY && m->n == 2 && m->items[0].type == ZT_JSON_STRING && m->items[1].type == ZT_JSON_STRING) {
        *l = m->items[0].str, *ll = m->items[0].str_len, *r = m->items[1].str, *rl = m->items[1].str_len;
        return *ll && *rl ? 0 : -1;
    }
    if (m->type != ZT_JSON_STRING) return -1;
    const char *sp = memchr(m->str, ' ', m->str_len);
    if (!sp || sp == m->str || sp + 1 == m->str + m->str_len || memchr(sp + 1, ' ', m->str_len - (size_t)(sp + 1 - m->str)))
        return -1;
    *l = m->str, *ll = (size_t)(sp - m->str), *r = sp + 1, *rl = m->str_len - *ll - 1;
    return 0;
}

static int load_merges(zt_tokenizer *t, const zt_json *merges, const int u2b[324], const char *path, zt_err *err) {
    size_t cap = 0;
    uint8_t *buf = NULL;
    int rc = -1;
    for (int i = 0; i < merges->n; i++) {
        const zt_json *m = &merges->items[i];
        const char *l, *r;
        size_t ll, rl, nl = 0, nr = 0;
        if (merge_parts(m, &l, &ll, &r, &rl)) {
            zt_fail(err, "%s:%d:%d: model.merges[%d]: expected \"LEFT RIGHT\" or [\"LEFT\", \"RIGHT\"]", path, m->line, m->col, i);
            goto done;
        }
        if (ll + rl > cap) buf = zt_xrealloc(buf, cap = 2 * (ll + rl));
        int a = zt_alphabet_bytes((const uint8_t *)l, ll, u2b, buf, &nl, NULL) ? -1 : zt_vmap_find(t, buf, nl);
        int b = zt_alphabet_bytes((const uint8_t *)r, rl, u2b, buf + nl, &nr, NULL) ? -1 : zt_vmap_find(t, buf + nl, nr);
        int merged = a < 0 || b < 0 ? -1 : zt_vmap_find(t, buf, nl + nr);
        if (a < 0 || b < 0) {
            zt_fail(err, "%s:%d:%d: model.merges[%d]: token \"%.*s\" is not in model.vocab", path, m->line, m->col, i,
                    (int)(a < 0 ? ll : rl), a < 0 ? l : r);
            goto done;
        }
        if (merged < 0) {
            zt_fail(err, "%s:%d:%d: model.merges[%d]: the merged token \"%.*s%.*s\" is not in model.vocab", path, m->line,
                    m->col, i, (int)ll, l, (int)rl, r);
            goto done;
        }
        zt_pair_put(t, a, b, merged, i); /* a repeated rule: the later rank, as Hugging Face's map keeps */
    }
    rc = 0;
done:
    free(buf);
    return rc;
}

int zt_tokenizer_json_fill(zt_tokenizer *t, const char *path, zt_err *err) {
    zt_json root;
    if (zt_json_read_file_max(path, VOCAB_FILE_MAX_BYTES, &root, err)) return -1;
    int u2b[324], b2u[256], rc = -1;
    zt_byte_alphabet(b2u, u2b);
    uint32_t *klen = NULL, *kpos = NULL;
    uint8_t *all = NULL, *is_added = NULL;
    const char **key_of = NULL;
    if (root.type != ZT_JSON_OBJECT) {
        zt_fail(err, "%s:%d:%d: expected a tokenizer.json object, got %s", path, root.line, root.col, zt_json_type_name(root.type));
        goto done;
    }
    if (check_pipeline(t, &root, path, err)) goto done;
    const zt_json *model = zt_json_get(&root, "model"), *vocab = zt_json_get(model, "vocab");
    const zt_json *merges = zt_json_get(model, "merges"), *added = zt_json_get(&root, "added_tokens");
    if (!vocab || vocab->type != ZT_JSON_OBJECT || vocab->n == 0) {
        zt_fail(err, "%s: missing key model.vocab (an object of token -> id)", path);
        goto done;
    }
    if (!merges || merges->type != ZT_JSON_ARRAY) {
        zt_fail(err, "%s: missing key model.merges (an array)", path);
        goto done;
    }
    if (added && added->type != ZT_JSON_ARRAY) {
        zt_fail(err, "%s:%d:%d: added_tokens: expected an array", path, added->line, added->col);
        goto done;
    }
    if (load_pre_tokenizer(t, zt_json_get(&root, "pre_tokenizer"), path, err)) goto done;
    t->ignore_merges = flag(model, "ignore_merges");

    /* ids: the largest + 1, added tokens included */
    int n_added = added ? added->n : 0, max_id = -1;
    for (int i = 0; i < vocab->n; i++) {
        int id = json_id(&vocab->items[i], path, "model.vocab", err);
        if (id < 0) goto done;
        if (id > max_id) max_id = id;
    }
    for (int i = 0; i < n_added; i++) {
        const zt_json *a = &added->items[i], *content = zt_json_get(a, "content");
        int id = json_id(zt_json_get(a, "id"), path, "added_tokens", err);
        if (id < 0) goto done;
        if (!content || content->type != ZT_JSON_STRING || !content->str_len) {
            zt_fail(err, "%s:%d:%d: added_tokens[%d]: expected a non-empty \"content\"", path, a->line, a->col, i);
            goto done;
        }
        const char *opts[3] = {"lstrip", "rstrip", "single_word"};
        for (int k = 0; k < 3; k++)
            if (flag(a, opts[k])) { unsupported(err, path, a, "added token option", opts[k]); goto done; }
        if (id > max_id) max_id = id;
    }
    t->n_vocab = max_id + 1;
    klen = zt_xcalloc((size_t)t->n_vocab, sizeof *klen);
    kpos = zt_xcalloc((size_t)t->n_vocab, sizeof *kpos);
    is_added = zt_xcalloc((size_t)t->n_vocab, 1);
    key_of = zt_xcalloc((size_t)t->n_vocab, sizeof *key_of);
    for (int i = 0; i < vocab->n; i++) key_of[vocab->items[i].u] = vocab->keys[i];
    long max_added = -1;
    size_t all_cap = 16, all_n = 0;
    for (int i = 0; i < vocab->n; i++) all_cap += strlen(vocab->keys[i]);
    for (int i = 0; i < n_added; i++) all_cap += zt_json_get(&added->items[i], "content")->str_len;
    all = zt_xmalloc(all_cap);
    t->added = zt_xcalloc((size_t)n_added + 1, sizeof *t->added);
    for (int i = 0; i < n_added; i++) { /* an added token's bytes are its text */
        const zt_json *a = &added->items[i], *content = zt_json_get(a, "content");
        int id = (int)zt_json_get(a, "id")->u;
        if (is_added[id]) {
            zt_fail(err, "%s:%d:%d: added_tokens[%d]: id %d appears twice", path, a->line, a->col, i, id);
            goto done;
        }
        /* tokenizers keeps the id of a token model.vocab has; another it numbers on from the vocabulary
         * (whatever the file says): ids that disagree would encode differently, so they are refused */
        long numbered = max_added < 0 || max_added < vocab->n ? vocab->n : max_added + 1;
        if ((!key_of[id] || strcmp(key_of[id], content->str)) && id != numbered) {
            zt_fail(err, "%s:%d:%d: added_tokens[%d]: id %d, but tokenizers numbers this token %ld (it is not in model.vocab)",
                    path, a->line, a->col, i, id, numbered);
            goto done;
        }
        if (id > max_added) max_added = id;
        is_added[id] = 1;
        memcpy(all + all_n, content->str, content->str_len);
        klen[id] = (uint32_t)content->str_len;
        kpos[id] = (uint32_t)all_n;
        all_n += content->str_len;
        const zt_json *norm = zt_json_get(a, "normalized");
        int normalized = !norm || norm->type != ZT_JSON_BOOL || norm->boolean;
        if (normalized && t->nfc && !is_nfc(content)) { /* tokenizers would match its NFC, which decodes otherwise */
            unsupported(err, path, a, "added token", "with \"normalized\": true whose content is not NFC");
            goto done;
        }
        t->added[t->n_added++] = (zt_added_token){.id = id, .normalized = normalized, .len = (uint32_t)content->str_len};
        t->added_first[(uint8_t)content->str[0]] = 1;
        if (content->str_len > t->added_max) t->added_max = (uint32_t)content->str_len;
        const zt_json *special = zt_json_get(a, "special");
        const char *ends[3] = {"<|endoftext|>", "<|end_of_text|>", "</s>"};
        for (int k = 0; k < 3 && special && special->type == ZT_JSON_BOOL && special->boolean; k++)
            if (!strcmp(content->str, ends[k]) && (t->eot < 0 || k == 0)) t->eot = id;
    }
    qsort(t->added, (size_t)t->n_added, sizeof *t->added, by_length_desc);
    for (int i = 0; i < vocab->n; i++) {
        const zt_json *v = &vocab->items[i];
        int id = (int)v->u;
        size_t kn;
        uint32_t bad;
        if (is_added[id]) continue; /* decoded as its text; never a BPE result */
        if (klen[id]) {
            zt_fail(err, "%s:%d:%d: model.vocab: token id %d appears twice", path, v->line, v->col, id);
            goto done;
        }
        if (!vocab->keys[i][0]) {
            zt_fail(err, "%s:%d:%d: model.vocab: empty token", path, v->key_line, v->key_col);
            goto done;
        }
        if (zt_alphabet_bytes((const uint8_t *)vocab->keys[i], strlen(vocab->keys[i]), u2b, all + all_n, &kn, &bad)) {
            zt_fail(err, "%s:%d:%d: model.vocab: token has character U+%04X, which is not in the byte-level alphabet", path,
                    v->key_line, v->key_col, (unsigned)bad);
            goto done;
        }
        klen[id] = (uint32_t)kn;
        kpos[id] = (uint32_t)all_n;
        all_n += kn;
    }
    /* tokens in id order */
    t->off = zt_xmalloc(((size_t)t->n_vocab + 1) * sizeof *t->off);
    t->bytes = zt_xmalloc(all_n + 1);
    size_t o = 0;
    for (int id = 0; id < t->n_vocab; id++) {
        t->off[id] = (uint32_t)o;
        memcpy(t->bytes + o, all + kpos[id], klen[id]);
        o += klen[id];
    }
    t->off[t->n_vocab] = (uint32_t)o;
    zt_tok_tables(t, (size_t)t->n_vocab, (size_t)merges->n);
    for (int b = 0; b < 256; b++) t->byte_id[b] = -1;
    for (int id = 0; id < t->n_vocab; id++) {
        size_t n = t->off[id + 1] - t->off[id];
        if (is_added[id] || !n) continue;
        int other = zt_vmap_find(t, t->bytes + t->off[id], n);
        if (other >= 0) {
            zt_fail(err, "%s: model.vocab: token ids %d and %d have the same bytes", path, other, id);
            goto done;
        }
        zt_vmap_insert(t, id);
        if (n == 1) t->byte_id[t->bytes[t->off[id]]] = id;
    }
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) {
            zt_fail(err, "%s: model.vocab has no token for the byte 0x%02X (byte-level BPE has all 256)", path, b);
            goto done;
        }
    rc = load_merges(t, merges, u2b, path, err);
done:
    free(klen);
    free(kpos);
    free(is_added);
    free(key_of);
    free(all);
    zt_json_free(&root);
    return rc;
}
