/* shardgrid — configuration: a schema of typed keys, a config file, and
 * command-line overrides.
 *
 * A program declares its keys (name, type, default, help) in a schema, reads
 * an optional config file of "key = value" lines ('#' starts a comment; the
 * value runs to the end of the line, quotes optional), then applies
 * "--key value" / "--key=value" overrides from argv. Unknown keys, malformed
 * lines (with their line number) and values that do not parse as the key's
 * type are errors that name the key. Nothing here is collective: programs
 * read the config on every rank (or on one and broadcast the text) and agree
 * on failure.
 */
#ifndef SG_KV_H
#define SG_KV_H

#include <stdint.h>
#include <stdio.h>

#include "sg_status.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_kv_type {
  SG_KV_STRING = 0,
  SG_KV_INT,
  SG_KV_FLOAT,
  SG_KV_BOOL
} sg_kv_type;

typedef struct sg_kv_key {
  const char *name; /* [a-z0-9_-]+; "--name" on the command line */
  sg_kv_type type;
  const char *def; /* default value as text ("" for none) */
  const char *help;
} sg_kv_key;

typedef struct sg_kv *sg_kv_t;

/* A config over nkeys keys (the array must outlive the config). */
sg_status sg_kv_create(const sg_kv_key *keys, int nkeys, sg_kv_t *kv);
/* NULL and *kv == NULL are fine (SG_OK); sets *kv to NULL. */
sg_status sg_kv_destroy(sg_kv_t *kv);

/* Read "key = value" lines from a file. */
sg_status sg_kv_load_file(sg_kv_t kv, const char *path);
/* Read the same format from a string (source names it in messages). */
sg_status sg_kv_load_string(sg_kv_t kv, const char *text, const char *source);
/* Set one key from text (checked against its type). */
sg_status sg_kv_set(sg_kv_t kv, const char *key, const char *value);
/* Apply "--key value" and "--key=value" arguments from argv[first..argc).
 * "--config FILE" loads a file at that point (later arguments override it).
 * A bool key also accepts a bare "--key" (true). Arguments the caller
 * handles itself are skipped when listed in `skip` (NULL-terminated, e.g.
 * {"--help", NULL}). */
sg_status sg_kv_parse_args(sg_kv_t kv, int argc, char **argv, int first,
                           const char *const *skip);

/* Typed getters (the key must exist in the schema). */
const char *sg_kv_str(sg_kv_t kv, const char *key);
int64_t sg_kv_int(sg_kv_t kv, const char *key);
double sg_kv_float(sg_kv_t kv, const char *key);
int sg_kv_bool(sg_kv_t kv, const char *key);
/* 1 if set by a file or an argument (not just the default). */
int sg_kv_is_set(sg_kv_t kv, const char *key);

/* Print "  --name TYPE  help (default: x)" lines. */
void sg_kv_print_help(sg_kv_t kv, FILE *out);
/* The effective configuration as "key = value" lines (malloc'd; free it). */
char *sg_kv_dump(sg_kv_t kv);

#ifdef __cplusplus
}
#endif
#endif /* SG_KV_H */
