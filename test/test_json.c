/* test_json.c — the JSON reader (src/util/json.c): values, escapes and numbers parse to what they
 * say; positions are line:column; every kind of bad input fails with NAME:LINE:COL. */
#include <math.h>
#include <string.h>

#include "check.h"
#include "util/json.h"

static void test_values(void) {
    const char *text = "{\n  \"a\": [1, -2.5e1, 18446744073709551615, 18446744073709551616],\n"
                       "  \"s\": \"tab\\there \\u00e9\\ud83d\\ude00 \\\"q\\\" \\u0000x\",\n  \"t\": true, \"f\": false, \"n\": null,\n"
                       "  \"o\": {\"deep\": {}}\n}\n";
    zt_json v;
    zt_err err;
    int rc = zt_json_parse(text, strlen(text), "x.json", &v, &err);
    CHECK(rc == 0 && v.type == ZT_JSON_OBJECT && v.n == 6, "parse_object", "rc %d %s", rc, rc ? err.msg : "");
    if (rc) return;
    const zt_json *a = zt_json_get(&v, "a"), *s = zt_json_get(&v, "s"), *o = zt_json_get(&v, "o");
    CHECK(a && a->n == 4 && a->items[0].is_uint && a->items[0].u == 1 && !a->items[1].is_uint && a->items[1].number == -25.0 &&
              a->items[2].is_uint && a->items[2].u == UINT64_MAX && !a->items[3].is_uint && a->items[3].number > 1.8e19,
          "numbers", "parsed wrongly");
    static const char want[] = "tab\there \xc3\xa9\xf0\x9f\x98\x80 \"q\" \0x";
    CHECK(s && s->str_len == sizeof want - 1 && memcmp(s->str, want, sizeof want - 1) == 0, "string_escapes",
          "len %zu", s ? s->str_len : 0);
    CHECK(zt_json_get(&v, "t")->boolean == 1 && zt_json_get(&v, "f")->type == ZT_JSON_BOOL &&
              zt_json_get(&v, "n")->type == ZT_JSON_NULL && zt_json_get(o, "deep")->type == ZT_JSON_OBJECT &&
              zt_json_get(&v, "missing") == NULL && zt_json_get(a, "a") == NULL,
          "lookup", "wrong");
    CHECK(a->line == 2 && a->col == 8 && a->key_line == 2 && a->key_col == 3 && o->line == 5 && o->col == 8, "positions",
          "a %d:%d key %d:%d o %d:%d", a->line, a->col, a->key_line, a->key_col, o->line, o->col);
    zt_json_free(&v);
}

static void test_errors(void) {
    struct { const char *name, *text, *want; } bad[] = {
        {"empty", "", "f.json:1:1: unexpected end of input"},
        {"trailing_comma", "[1,\n 2,]", "f.json:2:4: unexpected character ']'"},
        {"missing_colon", "{\"a\" 1}", "f.json:1:6: expected ':'"},
        {"unterminated_string", "{\"a\": \"xy", "f.json:1:7: unterminated string"},
        {"control_char", "\"a\nb\"", "f.json:1:3: control character"},
        {"bad_escape", "\n\n  \"\\x\"", "f.json:3:4: bad escape \\x"},
        {"lone_low_surrogate", "\"\\udc00\"", "f.json:1:2: unpaired low surrogate"},
        {"bad_utf8", "\"\xff\"", "f.json:1:2: invalid UTF-8"},
        {"leading_zero", "[01]", "f.json:1:2: bad number (leading zero)"},
        {"bare_word", "[nul]", "f.json:1:2: unexpected character 'n'"},
        {"after_value", "{} x", "f.json:1:4: unexpected data after the JSON value"},
        {"duplicate_key", "{\"k\": 1,\n \"k\": 2}", "f.json:2:2: duplicate key \"k\""},
        {"nul_in_key", "{\"a\\u0000\": 1}", "f.json:1:2: a key holds a NUL"},
        {"deep", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[",
         "nesting deeper than 128"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zt_json v;
        zt_err err = {{0}};
        int rc = zt_json_parse(bad[i].text, strlen(bad[i].text), "f.json", &v, &err);
        char name[64];
        snprintf(name, sizeof name, "error_%s", bad[i].name);
        CHECK(rc != 0 && strstr(err.msg, bad[i].want) && v.type == ZT_JSON_NULL, name, "want '%s', got '%s'", bad[i].want,
              rc ? err.msg : "parsed");
        zt_json_free(&v);
    }
    /* many keys: the sorted duplicate check finds the later duplicate */
    char big[40000];
    size_t k = 0;
    k += (size_t)snprintf(big + k, sizeof big - k, "{");
    for (int i = 0; i < 1000; i++) k += (size_t)snprintf(big + k, sizeof big - k, "%s\"k%d\": %d", i ? ",\n" : "", i % 700 == 699 ? 5 : i, i);
    snprintf(big + k, sizeof big - k, "}");
    zt_json v;
    zt_err err = {{0}};
    int rc = zt_json_parse(big, strlen(big), "big.json", &v, &err);
    CHECK(rc != 0 && strstr(err.msg, "big.json:700:1:") && strstr(err.msg, "duplicate key \"k5\""), "error_duplicate_among_many_keys",
          "got '%s'", rc ? err.msg : "parsed");
    zt_json_free(&v);
    rc = zt_json_read_file("/nonexistent/x.json", &v, &err);
    CHECK(rc != 0 && strstr(err.msg, "/nonexistent/x.json"), "error_missing_file", "got '%s'", err.msg);
}

int main(void) {
    test_values();
    test_errors();
    return zt_check_exit();
}
