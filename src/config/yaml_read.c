/* yaml_read.c — the config module's YAML reading (yaml_read.h): a file as one document, with the
 * limits every config file has (ZT_CONFIG_MAX_BYTES, ZT_CONFIG_MAX_DEPTH checked on the event
 * stream before the tree is built) and libyaml's problems as FILE:LINE:COL; and a `--set KEY=VALUE`
 * split and its VALUE read as YAML. What the nodes mean (keys, types, ranges) is config.c's. */
#include "config/yaml_read.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <yaml.h>

static int yaml_problem(const char *where, const yaml_parser_t *p, zt_err *err) {
    const char *problem = p->problem ? p->problem : "cannot parse";
    if (p->error == YAML_READER_ERROR)
        return zt_fail(err, "%s: byte %zu: %s", where, p->problem_offset, problem);
    if (p->context)
        return zt_fail(err, "%s:%zu:%zu: %s (%s that starts at %zu:%zu)", where, p->problem_mark.line + 1,
                       p->problem_mark.column + 1, problem, p->context, p->context_mark.line + 1,
                       p->context_mark.column + 1);
    return zt_fail(err, "%s:%zu:%zu: %s", where, p->problem_mark.line + 1, p->problem_mark.column + 1, problem);
}

/* Nesting deeper than ZT_CONFIG_MAX_DEPTH is refused from libyaml's event stream, as the levels
 * arrive: the document loader would first build the whole tree, and libyaml's scanner slows with
 * every open level (a 200k-deep list took minutes). */
static int check_depth(const char *path, const char *text, size_t len, zt_err *err) {
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser)) return zt_fail(err, "%s: cannot initialise the YAML parser", path);
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int depth = 0, rc = 0;
    for (;;) {
        yaml_event_t ev;
        if (!yaml_parser_parse(&parser, &ev)) {
            rc = 0; /* syntax errors are the loader's to report, with their context */
            break;
        }
        yaml_event_type_t type = ev.type;
        if (type == YAML_SEQUENCE_START_EVENT || type == YAML_MAPPING_START_EVENT) depth++;
        if (type == YAML_SEQUENCE_END_EVENT || type == YAML_MAPPING_END_EVENT) depth--;
        if (depth > ZT_CONFIG_MAX_DEPTH)
            rc = zt_fail(err, "%s:%zu:%zu: nested deeper than %d levels, the most a config may be", path,
                         ev.start_mark.line + 1, ev.start_mark.column + 1, ZT_CONFIG_MAX_DEPTH);
        yaml_event_delete(&ev);
        if (rc || type == YAML_STREAM_END_EVENT) break;
    }
    yaml_parser_delete(&parser);
    return rc;
}

/* Reads PATH as one YAML document, refusing what every config file is refused for (over
 * ZT_CONFIG_MAX_BYTES, nested deeper than ZT_CONFIG_MAX_DEPTH, a syntax error with its position, a
 * second document). The caller deletes *doc on success; its root may be NULL (an empty file). */
int zt_yaml_read_file(const char *path, yaml_document_t *doc, zt_err *err) {
    size_t len;
    char *text = zt_read_file_max(path, ZT_CONFIG_MAX_BYTES, &len, err);
    if (!text) return -1;
    if (check_depth(path, text, len, err)) {
        free(text);
        return -1;
    }
    yaml_parser_t parser;
    yaml_document_t extra;
    if (!yaml_parser_initialize(&parser)) {
        free(text);
        return zt_fail(err, "%s: cannot initialise the YAML parser", path);
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc = 0;
    if (!yaml_parser_load(&parser, doc)) {
        rc = yaml_problem(path, &parser, err);
    } else if (yaml_document_get_root_node(doc)) {
        if (!yaml_parser_load(&parser, &extra)) {
            rc = yaml_problem(path, &parser, err);
        } else {
            const yaml_node_t *r2 = yaml_document_get_root_node(&extra);
            if (r2)
                rc = zt_fail(err, "%s:%zu:%zu: expected one YAML document, found a second one", path,
                             r2->start_mark.line + 1, r2->start_mark.column + 1);
            yaml_document_delete(&extra);
        }
        if (rc) yaml_document_delete(doc);
    }
    yaml_parser_delete(&parser);
    free(text);
    return rc;
}


/* Splits "KEY=VALUE" and reads VALUE as YAML into doc (the caller deletes it on success). */
int zt_yaml_read_override(const char *spec, char key[256], yaml_document_t *doc, zt_err *err) {
    const char *eq = strchr(spec, '=');
    if (!eq || eq == spec) return zt_fail(err, "--set %s: expected KEY=VALUE (e.g. optimizer.params.lr=3e-4)", spec);
    size_t klen = (size_t)(eq - spec);
    while (klen > 0 && isspace((unsigned char)spec[klen - 1])) klen--;
    if (klen >= 256) return zt_fail(err, "--set: key too long");
    memcpy(key, spec, klen);
    key[klen] = '\0';
    const char *value = eq + 1;

    int have_doc = 0;
    {
        yaml_parser_t parser;
        yaml_parser_initialize(&parser);
        yaml_parser_set_input_string(&parser, (const unsigned char *)value, strlen(value));
        if (yaml_parser_load(&parser, doc)) {
            have_doc = 1;
        } else if (value[0] == '[' || value[0] == '{') {
            int rc = zt_fail(err, "--set %s: cannot parse value '%s': %s", key, value,
                             parser.problem ? parser.problem : "syntax error");
            yaml_parser_delete(&parser);
            return rc;
        }
        yaml_parser_delete(&parser);
    }
    if (!have_doc || !yaml_document_get_root_node(doc)) {
        /* empty value -> null; text YAML cannot read (e.g. "*.bin") -> a plain string */
        if (have_doc) yaml_document_delete(doc);
        if (!yaml_document_initialize(doc, NULL, NULL, NULL, 1, 1)) return zt_fail(err, "--set: out of memory");
        int empty = !have_doc ? 0 : 1;
        const char *txt = empty ? "null" : value;
        yaml_document_add_scalar(doc, NULL, (yaml_char_t *)txt, (int)strlen(txt),
                                 empty ? YAML_PLAIN_SCALAR_STYLE : YAML_SINGLE_QUOTED_SCALAR_STYLE);
    }
    return 0;
}
