/* yaml_read.h — the config module's YAML reading, for the other files of the module that read YAML
 * of their own shape (hw_profile.c): the same limits (its own, below config.c, which includes
 * this), the same error positions as a config file.
 * Reading is yaml_read.c's; zt_yaml_number and zt_yaml_describe are config.c's (they share its
 * classification of plain scalars). */
#ifndef ZT_YAML_READ_H
#define ZT_YAML_READ_H

#include <yaml.h>

#include "util/util.h"

/* a config file larger, or nested deeper, is refused before it is parsed (a real one is a few KB,
 * 4 levels deep) */
#define ZT_CONFIG_MAX_BYTES ((size_t)16 << 20)
#define ZT_CONFIG_MAX_DEPTH 64

/* Reads PATH as one YAML document: refuses a file over ZT_CONFIG_MAX_BYTES or nested deeper than
 * ZT_CONFIG_MAX_DEPTH before parsing it, a syntax error as "PATH:LINE:COL: problem", and a second
 * document. On success the caller yaml_document_delete()s *doc; its root is NULL for an empty file. */
int zt_yaml_read_file(const char *path, yaml_document_t *doc, zt_err *err);
/* Splits a `--set` "KEY=VALUE" into key and reads VALUE as YAML into *doc: an empty VALUE is null,
 * text YAML cannot read ("*.bin") a quoted string, a broken flow list or mapping an error. On
 * success the caller yaml_document_delete()s *doc. */
int zt_yaml_read_override(const char *spec, char key[256], yaml_document_t *doc, zt_err *err);
/* A plain scalar in the config's number syntax into *out: 0, else -1 (a string, a list, null...). */
int zt_yaml_number(const yaml_node_t *n, double *out);
/* What a node is, for "expected ..., got X" messages: "null", "a list", "a mapping", the scalar. */
void zt_yaml_describe(const yaml_node_t *n, char *out, size_t cap);

#endif
