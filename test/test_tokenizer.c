/* test_tokenizer.c — GPT-2 tokenizer, token shards and `zerotrain tokenize`.
 * Expected ids come from test/t_tokenizer_ref.py --ids (an independent Python implementation of
 * OpenAI's encoder.py), hard-coded here.
 * Extra modes used by t_tokenizer_ref.py:
 *   test_tokenizer --encode FILE [VOCAB_DIR]          ids of the whole file, space-separated
 *   test_tokenizer --encode-records FILE [VOCAB_DIR]  FILE = records of (uint64 LE length, bytes);
 *                                                     one line of ids per record */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "io/shard.h"
#include "io/tokenizer.h"
#include "util/util.h"

#define VOCAB "data/gpt2"
#define CORPUS "data/tinyshakespeare.txt"

typedef struct tcase {
    const char *name, *text;
    size_t len;
    int ids[64];
    size_t n;
} tcase;

static const tcase CASES[] = {

    {"hello_world", "Hello world", sizeof("Hello world") - 1, {15496, 995}, 2},
    {"contraction_IT_S", "IT'S", sizeof("IT'S") - 1, {2043, 6, 50}, 3},
    {"contraction_dont", "don't", sizeof("don't") - 1, {9099, 470}, 2},
    {"contractions_all", "she's it'll we've I'm you're he'd can't", sizeof("she's it'll we've I'm you're he'd can't") - 1, {7091, 338, 340, 1183, 356, 1053, 314, 1101, 345, 821, 339, 1549, 460, 470}, 14},
    {"curly_apostrophe", "it\xe2\x80\x99s", sizeof("it\xe2\x80\x99s") - 1, {270, 447, 247, 82}, 4},
    {"leading_spaces", "   leading spaces", sizeof("   leading spaces") - 1, {220, 220, 3756, 9029}, 4},
    {"trailing_spaces", "trailing spaces   ", sizeof("trailing spaces   ") - 1, {9535, 4386, 9029, 220, 220, 220}, 6},
    {"space_runs_between", "a    b\x0a\x0a\x0a" "c", sizeof("a    b\x0a\x0a\x0a" "c") - 1, {64, 220, 220, 220, 275, 628, 198, 66}, 8},
    {"crlf", "line one\x0d\x0aline two\x0d\x0a", sizeof("line one\x0d\x0aline two\x0d\x0a") - 1, {1370, 530, 201, 198, 1370, 734, 201, 198}, 8},
    {"tabs", "\x09indented\x09\x09" "code\x09", sizeof("\x09indented\x09\x09" "code\x09") - 1, {197, 521, 4714, 197, 197, 8189, 197}, 7},
    {"chinese", "\xe6\x88\x91\xe7\x88\xb1\xe5\x8c\x97\xe4\xba\xac\xe5\xa4\xa9\xe5\xae\x89\xe9\x97\xa8", sizeof("\xe6\x88\x91\xe7\x88\xb1\xe5\x8c\x97\xe4\xba\xac\xe5\xa4\xa9\xe5\xae\x89\xe9\x97\xa8") - 1, {22755, 239, 163, 230, 109, 44293, 245, 12859, 105, 25465, 22522, 231, 29785, 101}, 14},
    {"russian", "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80!", sizeof("\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82, \xd0\xbc\xd0\xb8\xd1\x80!") - 1, {140, 253, 21169, 18849, 38857, 16843, 20375, 11, 12466, 120, 18849, 21169, 0}, 13},
    {"arabic", "\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85", sizeof("\xd9\x85\xd8\xb1\xd8\xad\xd8\xa8\xd8\xa7 \xd8\xa8\xd8\xa7\xd9\x84\xd8\xb9\xd8\xa7\xd9\x84\xd9\x85") - 1, {25405, 26897, 148, 255, 39848, 12919, 17550, 101, 23525, 44690, 23525, 25405}, 12},
    {"combining_mark", "cafe\xcc\x81 e\xcc\x81\xcc\x81", sizeof("cafe\xcc\x81 e\xcc\x81\xcc\x81") - 1, {66, 8635, 136, 223, 304, 136, 223, 136, 223}, 9},
    {"emoji_zwj", "family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 ok \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd", sizeof("family \xf0\x9f\x91\xa8\xe2\x80\x8d\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 ok \xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd") - 1, {17989, 50169, 101, 447, 235, 41840, 102, 447, 235, 41840, 100, 12876, 50169, 235, 8582, 237, 121}, 17},
    {"arabic_indic_digits", "\xd9\xa1\xd9\xa2\xd9\xa3 \xdb\xb4\xdb\xb5", sizeof("\xd9\xa1\xd9\xa2\xd9\xa3 \xdb\xb4\xdb\xb5") - 1, {149, 94, 149, 95, 149, 96, 220, 151, 112, 151, 113}, 11},
    {"devanagari_digits", "\xe0\xa5\xa7\xe0\xa5\xa8\xe0\xa5\xa9 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87", sizeof("\xe0\xa5\xa7\xe0\xa5\xa8\xe0\xa5\xa9 \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4\xe0\xa5\x87") - 1, {24231, 100, 24231, 101, 24231, 102, 28225, 101, 11976, 106, 11976, 116, 24231, 235, 11976, 97, 24231, 229}, 18},
    {"literal_G_dot", "\xc4\xa0hello \xc4\xa0", sizeof("\xc4\xa0hello \xc4\xa0") - 1, {128, 254, 31373, 34754, 254}, 5},
    {"endoftext_literal", "<|endoftext|>", sizeof("<|endoftext|>") - 1, {27, 91, 437, 1659, 5239, 91, 29}, 7},
    {"digits_mixed", "1234567 3.14159 x86_64", sizeof("1234567 3.14159 x86_64") - 1, {10163, 2231, 3134, 513, 13, 1415, 19707, 2124, 4521, 62, 2414}, 11},
    {"nel_nbsp_ideographic", "a\xc2\x85" "b\xc2\xa0" "c\xe3\x80\x80" "d\xe2\x80\xa8", sizeof("a\xc2\x85" "b\xc2\xa0" "c\xe3\x80\x80" "d\xe2\x80\xa8") - 1, {64, 126, 227, 65, 1849, 66, 5099, 222, 67, 447, 101}, 11},
    {"not_whitespace_1c_180e", "a\x1c" "b \x1f c\xe1\xa0\x8e" "d \xe1\xa0\x8e", sizeof("a\x1c" "b \x1f c\xe1\xa0\x8e" "d \xe1\xa0\x8e") - 1, {64, 216, 65, 220, 219, 269, 157, 254, 236, 67, 28053, 254, 236}, 13},
    {"mongolian_vs_is_not_space", "x \xe1\xa0\x8e" "y \xe1\xa0\x8e!", sizeof("x \xe1\xa0\x8e" "y \xe1\xa0\x8e!") - 1, {87, 28053, 254, 236, 88, 28053, 254, 236, 0}, 9},
    {"x1c_is_not_space", "x \x1c" "y \x1c!", sizeof("x \x1c" "y \x1c!") - 1, {87, 220, 216, 88, 220, 216, 0}, 7},
    {"nel_is_space", "x \xc2\x85" "y \xc2\x85!", sizeof("x \xc2\x85" "y \xc2\x85!") - 1, {87, 220, 126, 227, 88, 220, 126, 227, 0}, 9},
    {"invalid_ff_fe", "\xff\xfe", sizeof("\xff\xfe") - 1, {187, 186}, 2},
    {"invalid_truncated", "abc\xe4\xb8 def\xf0\x9f\x98", sizeof("abc\xe4\xb8 def\xf0\x9f\x98") - 1, {39305, 160, 116, 825, 172, 253, 246}, 7},
    {"invalid_surrogate_overlong", "\xed\xa0\x80x\xc0\x80y", sizeof("\xed\xa0\x80x\xc0\x80y") - 1, {169, 254, 222, 87, 124, 222, 88}, 7},
    {"invalid_after_spaces", "word   \xff  tail", sizeof("word   \xff  tail") - 1, {4775, 220, 220, 220, 187, 220, 7894}, 7},
    {"nul_bytes", "a\x00" "b\x00\x00", sizeof("a\x00" "b\x00\x00") - 1, {64, 188, 65, 188, 188}, 5},
};

static int print_ids(const zt_ids *ids) {
    for (size_t i = 0; i < ids->n; i++) printf(i ? " %d" : "%d", ids->data[i]);
    printf("\n");
    return 0;
}

static int encode_mode(int records, const char *path, const char *vocab) {
    zt_err err;
    zt_tokenizer *tok = zt_tokenizer_load(vocab, &err);
    if (!tok) { zt_print_error(&err); return 1; }
    size_t len;
    char *buf = zt_read_file(path, &len, &err);
    if (!buf) { zt_print_error(&err); return 1; }
    zt_ids ids = {0};
    int rc = 0;
    if (!records) {
        if (zt_tokenizer_encode(tok, buf, len, &ids, &err)) { zt_print_error(&err); rc = 1; }
        else print_ids(&ids);
    } else {
        for (size_t pos = 0; pos + 8 <= len;) {
            uint64_t n = 0;
            for (int k = 0; k < 8; k++) n |= (uint64_t)(unsigned char)buf[pos + k] << (8 * k);
            pos += 8;
            if (n > len - pos) { fprintf(stderr, "bad record file\n"); rc = 1; break; }
            ids.n = 0;
            if (zt_tokenizer_encode(tok, buf + pos, n, &ids, &err)) { zt_print_error(&err); rc = 1; break; }
            print_ids(&ids);
            pos += n;
        }
    }
    zt_ids_free(&ids);
    free(buf);
    zt_tokenizer_free(tok);
    return rc;
}

static int write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    return fclose(f) == 0 && w == n ? 0 : -1;
}

static int contains(const char *s, const char *sub) { return strstr(s, sub) != NULL; }

static int roundtrip(const zt_tokenizer *tok, const char *text, size_t len, size_t *n_ids) {
    zt_ids ids = {0};
    zt_err err;
    if (zt_tokenizer_encode(tok, text, len, &ids, &err)) return 0;
    size_t dl;
    char *back = zt_tokenizer_decode_alloc(tok, ids.data, ids.n, &dl);
    int ok = dl == len && memcmp(back, text, len) == 0;
    for (size_t i = 0; i < ids.n; i++) ok &= ids.data[i] >= 0 && ids.data[i] < ZT_TOKEN_EOT;
    if (n_ids) *n_ids = ids.n;
    free(back);
    zt_ids_free(&ids);
    return ok;
}

static int dir_has_tmp(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while ((e = readdir(d))) found |= strstr(e->d_name, ".tmp.") != NULL;
    closedir(d);
    return found;
}

static void test_cases(const zt_tokenizer *tok) {
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        const tcase *tc = &CASES[c];
        zt_ids ids = {0};
        zt_err err;
        int rc = zt_tokenizer_encode(tok, tc->text, tc->len, &ids, &err);
        int ok = rc == 0 && ids.n == tc->n && memcmp(ids.data, tc->ids, tc->n * sizeof(int)) == 0;
        char got[512] = "", want[512] = "";
        for (size_t i = 0; i < ids.n && strlen(got) < 480; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", ids.data[i]);
        for (size_t i = 0; i < tc->n && strlen(want) < 480; i++) snprintf(want + strlen(want), sizeof want - strlen(want), " %d", tc->ids[i]);
        char name[96];
        snprintf(name, sizeof name, "encode_%s", tc->name);
        CHECK(ok, name, "got [%s ] want [%s ]", got, want);
        snprintf(name, sizeof name, "roundtrip_%s", tc->name);
        CHECK(roundtrip(tok, tc->text, tc->len, NULL), name, "decode(encode(x)) != x");
        zt_ids_free(&ids);
    }
    /* appending: encode does not clear OUT */
    zt_ids ids = {0};
    zt_err err;
    zt_ids_push(&ids, 7);
    zt_tokenizer_encode(tok, "Hello world", 11, &ids, &err);
    CHECK(ids.n == 3 && ids.data[0] == 7 && ids.data[1] == 15496 && ids.data[2] == 995, "encode_appends", "got %zu ids", ids.n);
    ids.n = 0;
    CHECK(zt_tokenizer_encode(tok, "", 0, &ids, &err) == 0 && ids.n == 0, "encode_empty", "empty text gave %zu ids", ids.n);
    zt_ids_free(&ids);
    /* decode details */
    int eot = ZT_TOKEN_EOT, bad[3] = {-1, 15496, 99999};
    char buf[32];
    size_t n = zt_tokenizer_decode(tok, &eot, 1, buf, sizeof buf);
    CHECK(n == 13 && memcmp(buf, "<|endoftext|>", 13) == 0, "decode_eot", "got %zu bytes", n);
    n = zt_tokenizer_decode(tok, bad, 3, buf, sizeof buf);
    CHECK(n == 5 && memcmp(buf, "Hello", 5) == 0, "decode_out_of_range_ids_skipped", "got %zu bytes", n);
    int hw[2] = {15496, 995};
    n = zt_tokenizer_decode(tok, hw, 2, buf, 4);
    CHECK(n == 11 && memcmp(buf, "Hell", 4) == 0, "decode_cut_short_returns_full_length", "got %zu", n);
    CHECK(zt_tokenizer_vocab_size(tok) == 50257, "vocab_size", "%d", zt_tokenizer_vocab_size(tok));
}

static void test_random_roundtrip(const zt_tokenizer *tok) {
    zt_rng rng;
    zt_rng_seed(&rng, 1234);
    static const char *frags[] = {"\xff", "\xfe", "\xc0\x80", "\xed\xa0\x80", "\xf4\x90\x80\x80", "\xe4\xb8", "\x80",
                                  "\xe4\xb8\xad", "\xc3\xa9", "a", " ", "\n", "'s", "1", "\xf0\x9f\x98\x80", "\xe2\x80\x8d",
                                  "  ", "\t", "\xc4\xa0", "Word", "\xd9\xa1"};
    int all_ok = 1;
    char fail_desc[128] = "";
    char buf[512];
    for (int t = 0; t < 200; t++) {
        size_t len = 0;
        int kind = t % 3;
        size_t target = zt_rng_u64(&rng) % 200;
        while (len < target) {
            if (kind == 0) buf[len++] = (char)(zt_rng_u64(&rng) & 0xFF);
            else {
                const char *f = frags[zt_rng_u64(&rng) % (sizeof frags / sizeof frags[0])];
                size_t fl = strlen(f);
                if (len + fl > sizeof buf) break;
                memcpy(buf + len, f, fl);
                len += fl;
                if (kind == 2 && zt_rng_u64(&rng) % 4 == 0) buf[len++] = 0;
            }
        }
        if (!roundtrip(tok, buf, len, NULL) && all_ok) {
            all_ok = 0;
            snprintf(fail_desc, sizeof fail_desc, "string %d (%zu bytes) did not round-trip", t, len);
        }
    }
    CHECK(all_ok, "roundtrip_200_random_byte_strings", "%s", fail_desc);

    /* pathological sizes: one 2 MB word, 1 MB of spaces, 1 MB of invalid bytes, 1 MB of emoji */
    size_t big = 2 << 20;
    char *s = zt_xmalloc(big);
    memset(s, 'a', big);
    size_t n_ids;
    int ok = roundtrip(tok, s, big, &n_ids);
    CHECK(ok, "roundtrip_2MB_single_word", "failed");
    memset(s, ' ', big / 2);
    s[big / 2 - 1] = 'x';
    CHECK(roundtrip(tok, s, big / 2, &n_ids) && n_ids == big / 2 - 1, "roundtrip_1MB_spaces_then_word", "%zu ids", n_ids);
    for (size_t i = 0; i < big / 2; i++) s[i] = (char)(0x80 + i % 64);
    CHECK(roundtrip(tok, s, big / 2, &n_ids) && n_ids == big / 2, "roundtrip_1MB_invalid_bytes", "%zu ids", n_ids);
    for (size_t i = 0; i + 4 <= big / 2; i += 4) memcpy(s + i, "\xf0\x9f\x98\x80", 4);
    CHECK(roundtrip(tok, s, big / 2, &n_ids), "roundtrip_1MB_emoji", "failed");
    free(s);
}

/* Strings of the fragments where the pattern's pieces meet in every way: all kinds of White_Space
 * (and the two look-alikes that are not), letters, digits and the rest in and out of ASCII,
 * apostrophes and contractions, invalid and cut-short UTF-8. */
static size_t random_text(zt_rng *rng, char *buf, size_t cap) {
    static const char *frags[] = {" ", "  ", "\n", "\n\n", "\r\n", "\t", "\x0b", "\xc2\x85", "\xc2\xa0", "\xe2\x80\x80",
                                  "\xe3\x80\x80", "\xe1\x9a\x80", "\xe1\xa0\x8e", "\x1c", "a", "Word", "\xc3\xa9", "\xe4\xb8\xad",
                                  "\xd0\x96", "1", "42", "\xd9\xa1", ",", "\xe3\x80\x82", "'", "'s", "'ll", "'re", "'S", "''",
                                  "\xff", "\x80", "\xe4\xb8", "\xc0\x80", "\xed\xa0\x80", "\xf0\x9f\x98\x80", "\xcc\x81",
                                  "\xe2\x80\x8d", "", "-", "x1"};
    size_t len = 0, target = zt_rng_u64(rng) % (cap / 5);
    while (len < target) {
        const char *f = frags[zt_rng_u64(rng) % (sizeof frags / sizeof frags[0])];
        size_t fl = f[0] ? strlen(f) : 1; /* "" is a NUL byte */
        memcpy(buf + len, f, fl);
        len += fl;
    }
    return len;
}

/* Every cut zt_tokenizer_last_cut claims: the two parts encoded alone give the ids of the whole
 * (the cut decided from the text up to 4 bytes past it, as the streaming tokenize reads it). */
static void test_cuts(const zt_tokenizer *tok) {
    zt_rng rng;
    zt_rng_seed(&rng, 48);
    zt_encoder *enc = zt_encoder_new(tok);
    zt_ids whole = {0}, parts = {0};
    zt_err err;
    char buf[400], desc[256] = "";
    size_t n_cuts = 0, n_bad = 0, n_positions = 0;
    for (int t = 0; t < 400; t++) {
        size_t len = random_text(&rng, buf, sizeof buf);
        whole.n = 0;
        zt_encoder_encode(enc, buf, len, &whole, &err);
        for (size_t a = 1; a + 4 <= len; a++, n_positions++) {
            if (zt_tokenizer_last_cut(tok, buf, a, a + 4) != a) continue;
            n_cuts++;
            parts.n = 0;
            zt_encoder_encode(enc, buf, a, &parts, &err);
            zt_encoder_encode(enc, buf + a, len - a, &parts, &err);
            if (parts.n == whole.n && memcmp(parts.data, whole.data, whole.n * sizeof *whole.data) == 0) continue;
            if (!n_bad++) {
                char esc[200];
                snprintf(desc, sizeof desc, "string %d cut at %zu of %zu changes its ids: %s", t, a, len, zt_escape(buf, len, esc, sizeof esc));
            }
        }
    }
    CHECK(n_bad == 0 && n_cuts > n_positions / 5, "cut_points_keep_the_ids", "%zu of %zu claimed cuts (%zu positions) wrong; %s",
          n_bad, n_cuts, n_positions, desc);
    /* what must never be cut: inside a run of one class, after a space, an apostrophe and a letter */
    const char *never[] = {"aaaaaaaa", "1234 5678", "x \n\n\n\ny", "it's....", "\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad\xe4\xb8\xad"};
    size_t at[] = {4, 5, 4, 3, 6};
    int ok = 1;
    for (int i = 0; i < 5; i++) ok &= zt_tokenizer_last_cut(tok, never[i], at[i], at[i] + 1 + 3) != at[i];
    CHECK(ok && zt_tokenizer_last_cut(tok, "ab cd....", 0, 9) == 5 && zt_tokenizer_last_cut(tok, "aaaaaaaa", 0, 8) == 0,
          "cut_points_where_expected", "a cut inside a piece, or none before ' cd'");
    zt_ids_free(&whole);
    zt_ids_free(&parts);
    zt_encoder_free(enc);
}

static void test_corpus(const zt_tokenizer *tok) {
    size_t len;
    zt_err err;
    char *text = zt_read_file(CORPUS, &len, &err);
    if (!CHECK(text != NULL, "corpus_readable", "%s", text ? "" : err.msg)) return;
    zt_ids ids = {0};
    int rc = zt_tokenizer_encode(tok, text, len, &ids, &err);
    CHECK(rc == 0 && ids.n == 338025, "corpus_338025_tokens", "got %zu tokens", ids.n);
    CHECK(ids.n >= 4 && ids.data[0] == 5962 && ids.data[1] == 22307 && ids.data[2] == 25 && ids.data[3] == 198,
          "corpus_first_ids_5962_22307_25_198", "got %d %d %d %d", ids.n > 0 ? ids.data[0] : -1,
          ids.n > 1 ? ids.data[1] : -1, ids.n > 2 ? ids.data[2] : -1, ids.n > 3 ? ids.data[3] : -1);
    size_t dl;
    char *back = zt_tokenizer_decode_alloc(tok, ids.data, ids.n, &dl);
    CHECK(dl == len && memcmp(back, text, len) == 0, "corpus_decode_roundtrip", "decoded %zu bytes of %zu", dl, len);
    free(back);
    zt_ids_free(&ids);
    free(text);
}

static void test_bad_vocab(const char *tmp) {
    char dir[512], path[600];
    zt_err err;
    zt_tokenizer *t = zt_tokenizer_load("/nonexistent/vocab", &err);
    CHECK(!t && contains(err.msg, "/nonexistent/vocab/encoder.json") && contains(err.msg, "cannot open"), "vocab_missing_dir",
          "%s", t ? "loaded" : err.msg);

    struct { const char *name, *json, *want; } bad[] = {
        {"truncated", "{\"a\": 1, \"b\"", ":1:13: expected ':'"},
        {"bad_escape", "{\"\\q\": 1}", ":1:3: bad escape"},
        {"lone_surrogate", "{\"\\ud800\": 1}", "unpaired high surrogate"},
        {"not_object", "[1, 2]", ":1:1: expected a JSON object"},
        {"not_alphabet", "{\"a\": 0,\n \" \": 1}", ":2:2: token has character U+0020"},
        {"dup_token", "{\"a\": 0, \"a\": 1}", ":1:10: duplicate key"},
        {"fraction_id", "{\"a\": 0.5}", ":1:7: token id is not an integer"},
        {"too_few", "{\"a\": 0, \"b\": 1}", "2 tokens, expected 50257"},
        {"dup_id", "{\"a\": 0, \"b\": 0}", "id 0 appears twice"},
        {"big_id", "{\"a\": 99999}", "out of range"},
        {"empty", "", ":1:1: unexpected end of input"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(dir, sizeof dir, "%s/vocab_%s", tmp, bad[i].name);
        mkdir(dir, 0755);
        snprintf(path, sizeof path, "%s/encoder.json", dir);
        write_file(path, bad[i].json, strlen(bad[i].json));
        t = zt_tokenizer_load(dir, &err);
        char name[96];
        snprintf(name, sizeof name, "vocab_encoder_json_%s", bad[i].name);
        CHECK(!t && contains(err.msg, path) && contains(err.msg, bad[i].want), name, "want \"%s\" naming %s, got: %s",
              bad[i].want, path, t ? "loaded" : err.msg);
        zt_tokenizer_free(t);
    }
    /* a good encoder.json with a broken vocab.bpe */
    size_t len;
    char *enc = zt_read_file(VOCAB "/encoder.json", &len, &err);
    snprintf(dir, sizeof dir, "%s/vocab_badbpe", tmp);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    if (enc) write_file(path, enc, len);
    free(enc);
    snprintf(path, sizeof path, "%s/vocab.bpe", dir);
    t = zt_tokenizer_load(dir, &err);
    CHECK(!t && contains(err.msg, path) && contains(err.msg, "cannot open"), "vocab_bpe_missing", "%s", t ? "loaded" : err.msg);
    const char *bpe1 = "#version: 0.2\n\xc4\xa0 t\n\xc4\xa0t\n";
    write_file(path, bpe1, strlen(bpe1));
    t = zt_tokenizer_load(dir, &err);
    char want[700];
    snprintf(want, sizeof want, "%s:3:", path);
    CHECK(!t && contains(err.msg, want), "vocab_bpe_malformed_line", "want %s, got: %s", want, t ? "loaded" : err.msg);
    const char *bpe2 = "#version: 0.2\n\xc4\xa0 t\nzzzq xyzzy\n";
    write_file(path, bpe2, strlen(bpe2));
    t = zt_tokenizer_load(dir, &err);
    CHECK(!t && contains(err.msg, want) && contains(err.msg, "not in encoder.json"), "vocab_bpe_unknown_token", "%s",
          t ? "loaded" : err.msg);
    /* a vocabulary file that never ends (/dev/zero) stops at the cap, one line naming it */
    unlink(path);
    CHECK(symlink("/dev/zero", path) == 0, "vocab_bpe_dev_zero_link", "cannot link %s", path);
    t = zt_tokenizer_load(dir, &err);
    CHECK(!t && contains(err.msg, path) && contains(err.msg, "larger than 67108864 bytes") && !strchr(err.msg, '\n'),
          "vocab_bpe_dev_zero_capped", "%s", t ? "loaded" : err.msg);
    snprintf(path, sizeof path, "%s/encoder.json", dir);
    unlink(path);
    CHECK(symlink("/dev/zero", path) == 0, "encoder_json_dev_zero_link", "cannot link %s", path);
    t = zt_tokenizer_load(dir, &err);
    CHECK(!t && contains(err.msg, path) && contains(err.msg, "larger than 67108864 bytes") && !strchr(err.msg, '\n'),
          "encoder_json_dev_zero_capped", "%s", t ? "loaded" : err.msg);
}

static void test_shards(const char *tmp) {
    char path[600], bad[700];
    zt_err err;
    uint16_t tok[1000];
    for (int i = 0; i < 1000; i++) tok[i] = (uint16_t)(i * 50 + 7);
    snprintf(path, sizeof path, "%s/s.bin", tmp);
    int rc = zt_shard_write(path, tok, 1000, &err);
    CHECK(rc == 0, "shard_write", "%s", rc ? err.msg : "");
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 1024 + 2000, "shard_size", "size %ld", (long)st.st_size);
    CHECK(!dir_has_tmp(tmp), "shard_write_leaves_no_temp", "a .tmp. file is left in %s", tmp);
    size_t n = 0;
    CHECK(zt_shard_read_header(path, &n, NULL, &err) == 0 && n == 1000, "shard_read_header", "n=%zu %s", n, err.msg);
    uint16_t *back = zt_shard_load(path, &n, &err);
    CHECK(back && n == 1000 && memcmp(back, tok, sizeof tok) == 0, "shard_load", "%s", back ? "content differs" : err.msg);
    free(back);
    /* header fields are little-endian int32 at offsets 0, 4, 8 */
    size_t len;
    char *raw = zt_read_file(path, &len, &err);
    CHECK(raw && (unsigned char)raw[0] == (20240520 & 0xFF) && raw[4] == 1 && (unsigned char)raw[8] == (1000 & 0xFF) && raw[9] == 3 &&
              raw[12] == 0,
          "shard_header_layout", "unexpected header bytes");

    snprintf(bad, sizeof bad, "%s/magic.bin", tmp);
    raw[0] ^= 1;
    write_file(bad, raw, len);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) &&
              contains(err.msg, "not a token shard (magic 20240521, expected 20240520, or 20240801 for uint32 tokens)"),
          "shard_wrong_magic", "%s", err.msg);
    raw[0] ^= 1;
    raw[4] = 2;
    snprintf(bad, sizeof bad, "%s/version.bin", tmp);
    write_file(bad, raw, len);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) && contains(err.msg, "unsupported shard version 2"),
          "shard_wrong_version", "%s", err.msg);
    raw[4] = 1;
    snprintf(bad, sizeof bad, "%s/trunc.bin", tmp);
    write_file(bad, raw, len - 3);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) &&
              contains(err.msg, "truncated: header says 1000 tokens (3024 bytes) but file has 3021 bytes"),
          "shard_truncated", "%s", err.msg);
    CHECK(zt_shard_load(bad, &n, &err) == NULL && contains(err.msg, "truncated"), "shard_load_truncated", "%s", err.msg);
    write_file(bad, raw, 100);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) && contains(err.msg, "truncated"), "shard_truncated_header",
          "%s", err.msg);
    free(raw);
    snprintf(bad, sizeof bad, "%s/empty.bin", tmp);
    write_file(bad, "", 0);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) && contains(err.msg, "empty"), "shard_empty_file", "%s",
          err.msg);
    snprintf(bad, sizeof bad, "%s/missing.bin", tmp);
    CHECK(zt_shard_read_header(bad, &n, NULL, &err) && contains(err.msg, bad) && contains(err.msg, "cannot open"), "shard_missing_file",
          "%s", err.msg);
    snprintf(bad, sizeof bad, "%s/nodir/x.bin", tmp);
    CHECK(zt_shard_write(bad, tok, 10, &err) && contains(err.msg, bad) && access(bad, F_OK) != 0, "shard_write_unwritable", "%s",
          err.msg);
    /* an empty shard is valid */
    snprintf(path, sizeof path, "%s/zero.bin", tmp);
    back = NULL;
    CHECK(zt_shard_write(path, tok, 0, &err) == 0 && (back = zt_shard_load(path, &n, &err)) && n == 0, "shard_zero_tokens", "%s",
          err.msg);
    free(back);
}

/* Runs `./zerotrain tokenize ARGS...` (the command as a user runs it; tests link the library, not
 * the commands) and returns its exit status, -1 when it did not exit normally. */
static int run_tokenize(const char **args, int n) {
    char *argv[24];
    argv[0] = "./zerotrain";
    for (int i = 0; i < n; i++) argv[i + 1] = (char *)args[i];
    argv[n + 1] = NULL;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        execv(argv[0], argv);
        _exit(127);
    }
    int status;
    if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

/* The tokens of PREFIX_val.bin (when there) and PREFIX_train_000000.bin, ... in order into OUT;
 * *shards gets the train shard count and sizes[] their token counts (the val count first). */
static size_t read_shard_set(const char *prefix, zt_ids *out, size_t *sizes, int *shards) {
    char path[700];
    zt_err err;
    out->n = 0;
    *shards = 0;
    for (int s = -1;; s++) {
        if (s < 0) snprintf(path, sizeof path, "%s_val.bin", prefix);
        else snprintf(path, sizeof path, "%s_train_%06d.bin", prefix, s);
        size_t n = 0;
        uint16_t *v = access(path, F_OK) == 0 ? zt_shard_load(path, &n, &err) : NULL;
        if (s < 0) sizes[0] = n;
        if (!v && s >= 0) break;
        for (size_t i = 0; i < n; i++) zt_ids_push(out, v[i]);
        if (s >= 0 && s < 63) sizes[1 + s] = n;
        if (s >= 0) ++*shards;
        free(v);
    }
    return out->n;
}

/* Streaming: tiny blocks (cuts everywhere) and 1 or 3 threads give the ids of the whole documents,
 * split into val and shards exactly as the counts say; a failure in a later input removes the
 * shards already committed. */
static void test_tokenize_streaming(const zt_tokenizer *tok, const char *tmp) {
    char d1[600], d2[600], d3[600], prefix[600], path[700];
    snprintf(d1, sizeof d1, "%s/s1.txt", tmp);
    snprintf(d2, sizeof d2, "%s/s2.txt", tmp);
    snprintf(d3, sizeof d3, "%s/s3.txt", tmp);
    zt_rng rng;
    zt_rng_seed(&rng, 4848);
    char *text = zt_xmalloc(16384);
    size_t n1 = 0;
    while (n1 < 12000) n1 += random_text(&rng, text + n1, 400);
    memset(text + n1, ' ', 300); /* a run of one class longer than a block: no cut in it */
    n1 += 300;
    write_file(d1, text, n1);
    size_t clen;
    zt_err err;
    char *corpus = zt_read_file(CORPUS, &clen, &err);
    size_t n2 = corpus && clen > 3000 ? 3000 : 0;
    write_file(d2, corpus ? corpus : "", n2);
    write_file(d3, "", 0); /* an empty document still gets its <|endoftext|> */
    zt_ids want = {0}, got = {0};
    zt_tokenizer_encode(tok, text, n1, &want, &err);
    zt_ids_push(&want, ZT_TOKEN_EOT);
    zt_tokenizer_encode(tok, corpus, n2, &want, &err);
    zt_ids_push(&want, ZT_TOKEN_EOT);
    free(corpus);
    free(text);
    struct { const char *block, *threads, *fraction; } runs[] = {
        {"1", "1", "0.1"}, {"1", "3", "0.1"}, {"5", "3", "0.1"}, {"64", "2", "0"}, {"4096", "3", "0.25"}, {NULL, "1", "0.1"}};
    for (size_t r = 0; r < sizeof runs / sizeof runs[0]; r++) {
        if (runs[r].block) setenv("ZEROTRAIN_TOKENIZE_BLOCK", runs[r].block, 1);
        else unsetenv("ZEROTRAIN_TOKENIZE_BLOCK");
        snprintf(prefix, sizeof prefix, "%s/stream%zu", tmp, r);
        const char *a[] = {"tokenize", "--vocab", VOCAB, d1, d2, d3, "-o", prefix, "--shard-tokens", "1000", "-j", runs[r].threads,
                           "--val-fraction", runs[r].fraction};
        int rc = run_tokenize(a, 14);
        size_t sizes[64] = {0};
        int shards = 0;
        read_shard_set(prefix, &got, sizes, &shards);
        size_t n_val = (size_t)(atof(runs[r].fraction) * (double)want.n), n_train = want.n - n_val;
        int ok = rc == 0 && got.n == want.n && memcmp(got.data, want.data, want.n * sizeof *want.data) == 0;
        ok &= sizes[0] == n_val && shards == (int)((n_train + 999) / 1000);
        for (int s = 0; s < shards && s < 63; s++) ok &= sizes[1 + s] == (s + 1 < shards ? 1000 : n_train - 1000 * (size_t)s);
        char name[96];
        snprintf(name, sizeof name, "tokenize_stream_block_%s_j%s_val_%s", runs[r].block ? runs[r].block : "default",
                 runs[r].threads, runs[r].fraction);
        CHECK(ok && !dir_has_tmp(tmp), name, "rc %d, %zu tokens (want %zu), val %zu (want %zu), %d shards%s", rc, got.n, want.n,
              sizes[0], n_val, shards, dir_has_tmp(tmp) ? ", a .tmp. file left" : "");
    }
    /* the second input is missing: the train shards the first one filled are removed again */
    setenv("ZEROTRAIN_TOKENIZE_BLOCK", "64", 1);
    snprintf(prefix, sizeof prefix, "%s/streamfail", tmp);
    const char *a[] = {"tokenize", "--vocab", VOCAB, d1, "/nonexistent/doc.txt", "-o", prefix, "--shard-tokens", "100",
                       "--val-fraction", "0"};
    int rc = run_tokenize(a, 11);
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    CHECK(rc == 1 && access(path, F_OK) != 0 && !dir_has_tmp(tmp), "tokenize_stream_failure_removes_shards",
          "rc %d, %s %s", rc, path, access(path, F_OK) == 0 ? "left behind" : "");
    unsetenv("ZEROTRAIN_TOKENIZE_BLOCK");
    zt_ids_free(&want);
    zt_ids_free(&got);
}

static void test_tokenize_cmd(const zt_tokenizer *tok, const char *tmp) {
    char prefix[600], path[700], in1[600], in2[600];
    zt_err err;
    size_t n;
    /* the corpus, as the demo does it */
    snprintf(prefix, sizeof prefix, "%s/tiny", tmp);
    const char *a1[] = {"tokenize", "--vocab", VOCAB, CORPUS, "-o", prefix};
    CHECK(run_tokenize(a1, 6) == 0, "tokenize_corpus_rc", "non-zero exit");
    snprintf(path, sizeof path, "%s_val.bin", prefix);
    uint16_t *val = zt_shard_load(path, &n, &err);
    CHECK(val && n == 33802 && val[0] == 5962 && val[1] == 22307 && val[2] == 25 && val[3] == 198, "tokenize_corpus_val_head",
          "%s n=%zu", val ? "" : err.msg, n);
    free(val);
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    CHECK(zt_shard_read_header(path, &n, NULL, &err) == 0 && n == 338025 - 33802, "tokenize_corpus_train", "%s n=%zu", err.msg, n);
    snprintf(path, sizeof path, "%s_train_000001.bin", prefix);
    CHECK(access(path, F_OK) != 0, "tokenize_corpus_one_shard", "%s exists", path);

    /* two documents, small shards: EOT only between documents */
    snprintf(in1, sizeof in1, "%s/doc1.txt", tmp);
    snprintf(in2, sizeof in2, "%s/doc2.txt", tmp);
    write_file(in1, "Hello world", 11);
    write_file(in2, "IT'S", 4);
    snprintf(prefix, sizeof prefix, "%s/two", tmp);
    const char *a2[] = {"tokenize", "--vocab", VOCAB, in1, in2, "-o", prefix, "--val-fraction", "0.2", "--shard-tokens", "2"};
    CHECK(run_tokenize(a2, 11) == 0, "tokenize_two_docs_rc", "non-zero exit");
    int want[] = {15496, 995, ZT_TOKEN_EOT, 2043, 6, 50}; /* 6 tokens: val = 1, train = 5 in shards of 2 */
    int got[8], ng = 0, ok = 1;
    snprintf(path, sizeof path, "%s_val.bin", prefix);
    uint16_t *v = zt_shard_load(path, &n, &err);
    ok &= v && n == 1;
    for (size_t i = 0; v && i < n && ng < 8; i++) got[ng++] = v[i];
    free(v);
    for (int s = 0; s < 3; s++) {
        snprintf(path, sizeof path, "%s_train_%06d.bin", prefix, s);
        v = zt_shard_load(path, &n, &err);
        ok &= v && n == (s < 2 ? 2u : 1u);
        for (size_t i = 0; v && i < n && ng < 8; i++) got[ng++] = v[i];
        free(v);
    }
    ok &= ng == 6 && memcmp(got, want, sizeof want) == 0;
    snprintf(path, sizeof path, "%s_train_000003.bin", prefix);
    ok &= access(path, F_OK) != 0;
    CHECK(ok, "tokenize_two_docs_eot_between_and_shards", "shards do not hold 15496 995 50256 2043 6 50 split 1 | 2 2 1");

    /* unwritable output: the folder is a regular file */
    snprintf(prefix, sizeof prefix, "%s/doc1.txt/out", tmp);
    const char *a3[] = {"tokenize", "--vocab", VOCAB, in1, "-o", prefix};
    CHECK(run_tokenize(a3, 6) != 0, "tokenize_unwritable_output_fails", "exit 0");
    snprintf(path, sizeof path, "%s_val.bin", prefix);
    CHECK(access(path, F_OK) != 0 && !dir_has_tmp(tmp), "tokenize_unwritable_no_file", "a file was left");
    /* an output folder that does not exist */
    snprintf(prefix, sizeof prefix, "%s/nodir/out", tmp);
    const char *a4[] = {"tokenize", "--vocab", VOCAB, in1, "-o", prefix};
    CHECK(run_tokenize(a4, 6) != 0, "tokenize_missing_output_dir_fails", "exit 0");

    /* bad inputs and usage */
    snprintf(prefix, sizeof prefix, "%s/bad", tmp);
    const char *a5[] = {"tokenize", "--vocab", VOCAB, "/nonexistent/input.txt", "-o", prefix};
    CHECK(run_tokenize(a5, 6) != 0, "tokenize_missing_input_fails", "exit 0");
    const char *a6[] = {"tokenize", "--vocab", "/nonexistent/vocab", in1, "-o", prefix};
    CHECK(run_tokenize(a6, 6) != 0, "tokenize_missing_vocab_fails", "exit 0");
    snprintf(path, sizeof path, "%s_train_000000.bin", prefix);
    CHECK(access(path, F_OK) != 0, "tokenize_failures_write_nothing", "%s exists", path);
    const char *a7[] = {"tokenize", in1};
    CHECK(run_tokenize(a7, 2) == 2, "tokenize_usage_no_output", "want exit 2");
    const char *a8[] = {"tokenize", in1, "-o", prefix, "--val-fraction", "1.5"};
    CHECK(run_tokenize(a8, 6) == 2, "tokenize_usage_bad_fraction", "want exit 2");
    const char *a9[] = {"tokenize", in1, "-o", prefix, "--bogus"};
    CHECK(run_tokenize(a9, 5) == 2, "tokenize_usage_unknown_option", "want exit 2");
    (void)tok;
}

int main(int argc, char **argv) {
    if (argc >= 3 && (!strcmp(argv[1], "--encode") || !strcmp(argv[1], "--encode-records")))
        return encode_mode(!strcmp(argv[1], "--encode-records"), argv[2], argc > 3 ? argv[3] : VOCAB);
    zt_err err;
    zt_tokenizer *tok = zt_tokenizer_load(VOCAB, &err);
    if (!CHECK(tok != NULL, "tokenizer_load", "%s (run from the repository root)", tok ? "" : err.msg)) return zt_check_exit();
    char tmp[] = "/tmp/zt_test_tokenizer_XXXXXX";
    if (!mkdtemp(tmp)) {
        CHECK(0, "mkdtemp", "cannot create a temp folder");
        return zt_check_exit();
    }
    test_cases(tok);
    test_random_roundtrip(tok);
    test_cuts(tok);
    test_corpus(tok);
    test_bad_vocab(tmp);
    test_shards(tmp);
    test_tokenize_cmd(tok, tmp);
    test_tokenize_streaming(tok, tmp);
    zt_tokenizer_free(tok);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", tmp);
    return zt_check_exit();
}
