/* bench_tokenizer.c — GPT-2 tokenizer speed on one thread: load time, then encoding
 * data/tinyshakespeare.txt (median of 5 runs; each run starts with an empty piece cache) and a
 * synthetic mixed-script text of the same size. Prints "tokenizer: X MB/s (goal >= 5 MB/s)". */
#include <stdlib.h>
#include <string.h>

#include "io/tokenizer.h"
#include "util/util.h"

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median_encode(const zt_tokenizer *tok, const char *text, size_t len, size_t *n_tokens) {
    double t[5];
    zt_ids ids = {0};
    zt_err err;
    for (int r = 0; r < 5; r++) {
        ids.n = 0;
        double t0 = zt_now();
        if (zt_tokenizer_encode(tok, text, len, &ids, &err)) {
            zt_print_error(&err);
            exit(1);
        }
        t[r] = zt_now() - t0;
    }
    *n_tokens = ids.n;
    zt_ids_free(&ids);
    qsort(t, 5, sizeof t[0], cmp_double);
    return t[2];
}

int main(int argc, char **argv) {
    const char *vocab = argc > 1 ? argv[1] : "data/gpt2", *corpus = argc > 2 ? argv[2] : "data/tinyshakespeare.txt";
    zt_err err;
    double t0 = zt_now();
    zt_tokenizer *tok = zt_tokenizer_load(vocab, &err);
    if (!tok) { zt_print_error(&err); return 1; }
    printf("tokenizer: vocabulary load %.1f ms\n", 1e3 * (zt_now() - t0));
    size_t len, n;
    char *text = zt_read_file(corpus, &len, &err);
    if (!text) { zt_print_error(&err); return 1; }

    /* mixed scripts: words drawn from several alphabets, digits, punctuation, emoji */
    static const char *words[] = {"the ", "Привет ", "мир, ", "北京天安门", "。", "مرحبا ", "नमस्ते ", "123 ", "٣٤٥ ",
                                  "😀👍🏽 ", "café ", "it's ", "\n\n", "    ", "naïve ", "Ελληνικά ", "\t", "x86_64 "};
    char *mixed = zt_xmalloc(len + 64);
    zt_rng rng;
    zt_rng_seed(&rng, 7);
    size_t m = 0;
    while (m < len) {
        const char *w = words[zt_rng_u64(&rng) % (sizeof words / sizeof words[0])];
        size_t wl = strlen(w);
        memcpy(mixed + m, w, wl);
        m += wl;
    }

    double dm = median_encode(tok, mixed, m, &n);
    printf("tokenizer: mixed-script text %.1f MB/s, %.2f M tokens/s (%zu bytes -> %zu tokens)\n", m / dm / 1e6, n / dm / 1e6, m, n);
    double d = median_encode(tok, text, len, &n);
    printf("tokenizer: %s %zu bytes -> %zu tokens in %.1f ms (median of 5), %.2f M tokens/s\n", corpus, len, n, 1e3 * d,
           n / d / 1e6);
    printf("tokenizer: %.1f MB/s (goal >= 5 MB/s)\n", len / d / 1e6);
    free(mixed);
    free(text);
    zt_tokenizer_free(tok);
    return 0;
}
