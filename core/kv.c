/* shardgrid — configuration: schema, config files, command-line overrides. */
#include "sg_kv.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

struct sg_kv {
  const sg_kv_key *keys;
  int nkeys;
  char **values; /* current text of each key */
  int *set;
};

static int sg_kv_find(sg_kv_t kv, const char *name, size_t len) {
  for (int i = 0; i < kv->nkeys; ++i)
    if (strlen(kv->keys[i].name) == len &&
        strncmp(kv->keys[i].name, name, len) == 0)
      return i;
  /* accept '-' for '_' and the reverse */
  for (int i = 0; i < kv->nkeys; ++i) {
    const char *k = kv->keys[i].name;
    if (strlen(k) != len) continue;
    size_t j = 0;
    for (; j < len; ++j) {
      char a = k[j] == '-' ? '_' : k[j], b = name[j] == '-' ? '_' : name[j];
      if (a != b) break;
    }
    if (j == len) return i;
  }
  return -1;
}

static const char *sg_kv_type_name(sg_kv_type t) {
  switch (t) {
  case SG_KV_INT: return "int";
  case SG_KV_FLOAT: return "float";
  case SG_KV_BOOL: return "bool";
  default: return "string";
  }
}

static int sg_parse_bool(const char *v, int *out) {
  static const char *const yes[] = {"1", "true", "yes", "on"};
  static const char *const no[] = {"0", "false", "no", "off"};
  for (int i = 0; i < 4; ++i) {
    if (strcasecmp(v, yes[i]) == 0) {
      *out = 1;
      return 1;
    }
    if (strcasecmp(v, no[i]) == 0) {
      *out = 0;
      return 1;
    }
  }
  return 0;
}

static sg_status sg_kv_check_value(const sg_kv_key *k, const char *v) {
  sg_status st = SG_OK;
  char *end = NULL;
  int b;
  switch (k->type) {
  case SG_KV_INT:
    errno = 0;
    (void)strtoll(v, &end, 10);
    if (!*v || *end || errno)
      SG_RAISE(SG_ERR_CONFIG, "config key '%s' expects an integer, got '%s'",
               k->name, v);
    break;
  case SG_KV_FLOAT: {
    errno = 0;
    double d = strtod(v, &end);
    if (!*v || *end || errno || !isfinite(d))
      SG_RAISE(SG_ERR_CONFIG, "config key '%s' expects a number, got '%s'",
               k->name, v);
    break;
  }
  case SG_KV_BOOL:
    if (!sg_parse_bool(v, &b))
      SG_RAISE(SG_ERR_CONFIG, "config key '%s' expects true/false, got '%s'",
               k->name, v);
    break;
  default: break;
  }
fail:
  return st;
}

sg_status sg_kv_create(const sg_kv_key *keys, int nkeys, sg_kv_t *out) {
  sg_status st = SG_OK;
  struct sg_kv *kv = NULL;
  if (!out || (nkeys > 0 && !keys))
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_kv_create: NULL argument");
  *out = NULL;
  kv = calloc(1, sizeof *kv);
  if (!kv) SG_RAISE(SG_ERR_ALLOC, "sg_kv_create: out of memory");
  kv->keys = keys;
  kv->nkeys = nkeys;
  kv->values = calloc((size_t)(nkeys ? nkeys : 1), sizeof *kv->values);
  kv->set = calloc((size_t)(nkeys ? nkeys : 1), sizeof *kv->set);
  if (!kv->values || !kv->set)
    SG_RAISE(SG_ERR_ALLOC, "sg_kv_create: out of memory");
  for (int i = 0; i < nkeys; ++i) {
    const char *d = keys[i].def ? keys[i].def : "";
    if (*d) SG_TRY(sg_kv_check_value(&keys[i], d));
    kv->values[i] = strdup(d);
    if (!kv->values[i]) SG_RAISE(SG_ERR_ALLOC, "sg_kv_create: out of memory");
  }
  *out = kv;
  return SG_OK;
fail:
  sg_kv_destroy(&kv);
  return st;
}

sg_status sg_kv_destroy(sg_kv_t *kv) {
  if (!kv || !*kv) return SG_OK;
  if ((*kv)->values)
    for (int i = 0; i < (*kv)->nkeys; ++i) free((*kv)->values[i]);
  free((*kv)->values);
  free((*kv)->set);
  free(*kv);
  *kv = NULL;
  return SG_OK;
}

static sg_status sg_kv_set_n(sg_kv_t kv, const char *key, size_t klen,
                             const char *value) {
  sg_status st = SG_OK;
  int i = sg_kv_find(kv, key, klen);
  if (i < 0)
    SG_RAISE(SG_ERR_CONFIG, "unknown config key '%.*s' (see --help)", (int)klen,
             key);
  SG_TRY(sg_kv_check_value(&kv->keys[i], value));
  char *copy = strdup(value);
  if (!copy) SG_RAISE(SG_ERR_ALLOC, "sg_kv_set: out of memory");
  free(kv->values[i]);
  kv->values[i] = copy;
  kv->set[i] = 1;
fail:
  return st;
}

sg_status sg_kv_set(sg_kv_t kv, const char *key, const char *value) {
  sg_status st = SG_OK;
  if (!kv || !key || !value)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_kv_set: NULL argument");
  SG_TRY(sg_kv_set_n(kv, key, strlen(key), value));
fail:
  return st;
}

sg_status sg_kv_load_string(sg_kv_t kv, const char *text, const char *source) {
  sg_status st = SG_OK;
  char *buf = NULL;
  if (!kv || !text)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_kv_load_string: NULL argument");
  buf = strdup(text);
  if (!buf) SG_RAISE(SG_ERR_ALLOC, "sg_kv_load_string: out of memory");
  int lineno = 0;
  for (char *line = buf, *next; line; line = next) {
    ++lineno;
    next = strchr(line, '\n');
    if (next) *next++ = '\0';
    char *hash = strchr(line, '#');
    if (hash) *hash = '\0';
    char *s = line;
    while (isspace((unsigned char)*s)) ++s;
    char *e = s + strlen(s);
    while (e > s && isspace((unsigned char)e[-1])) *--e = '\0';
    if (!*s) continue;
    char *eq = strchr(s, '=');
    if (!eq)
      SG_RAISE(SG_ERR_CONFIG, "%s:%d: expected 'key = value', got '%.80s'",
               source ? source : "config", lineno, s);
    char *k_end = eq;
    while (k_end > s && isspace((unsigned char)k_end[-1])) --k_end;
    char *v = eq + 1;
    while (isspace((unsigned char)*v)) ++v;
    size_t vl = strlen(v);
    if (vl >= 2 && ((v[0] == '"' && v[vl - 1] == '"') ||
                    (v[0] == '\'' && v[vl - 1] == '\''))) {
      v[vl - 1] = '\0';
      ++v;
    }
    if (k_end == s)
      SG_RAISE(SG_ERR_CONFIG, "%s:%d: missing key before '='",
               source ? source : "config", lineno);
    st = sg_kv_set_n(kv, s, (size_t)(k_end - s), v);
    if (st != SG_OK) {
      char where[512];
      snprintf(where, sizeof where, "%s:%d: ", source ? source : "config",
               lineno);
      sg_error_prepend(where);
      goto fail;
    }
  }
fail:
  free(buf);
  return st;
}

sg_status sg_kv_load_file(sg_kv_t kv, const char *path) {
  sg_status st = SG_OK;
  FILE *f = NULL;
  char *text = NULL;
  if (!kv || !path)
    SG_RAISE(SG_ERR_INVALID_ARG, "sg_kv_load_file: NULL argument");
  f = fopen(path, "rb");
  if (!f)
    SG_RAISE(SG_ERR_IO, "cannot open config file '%s': %s", path,
             strerror(errno));
  if (fseek(f, 0, SEEK_END) != 0) SG_RAISE(SG_ERR_IO, "cannot read '%s'", path);
  long n = ftell(f);
  if (n < 0 || n > (1 << 24))
    SG_RAISE(SG_ERR_CONFIG, "config file '%s' is not a small text file", path);
  rewind(f);
  text = malloc((size_t)n + 1);
  if (!text) SG_RAISE(SG_ERR_ALLOC, "out of memory reading '%s'", path);
  if (fread(text, 1, (size_t)n, f) != (size_t)n)
    SG_RAISE(SG_ERR_IO, "cannot read '%s'", path);
  text[n] = '\0';
  if (memchr(text, '\0', (size_t)n))
    SG_RAISE(SG_ERR_CONFIG, "config file '%s' is not text", path);
  SG_TRY(sg_kv_load_string(kv, text, path));
fail:
  if (f) fclose(f);
  free(text);
  return st;
}

sg_status sg_kv_parse_args(sg_kv_t kv, int argc, char **argv, int first,
                           const char *const *skip) {
  sg_status st = SG_OK;
  for (int i = first; i < argc; ++i) {
    const char *a = argv[i];
    int skipped = 0;
    for (int s = 0; skip && skip[s]; ++s)
      if (strcmp(a, skip[s]) == 0) skipped = 1;
    if (skipped) continue;
    if (strncmp(a, "--", 2) != 0 || !a[2])
      SG_RAISE(SG_ERR_CONFIG,
               "unexpected argument '%s' (options are --key value)", a);
    const char *name = a + 2, *eq = strchr(name, '=');
    size_t nlen = eq ? (size_t)(eq - name) : strlen(name);
    if (nlen == 6 && strncmp(name, "config", 6) == 0) {
      const char *path = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
      if (!path) SG_RAISE(SG_ERR_CONFIG, "option --config needs a file name");
      SG_TRY(sg_kv_load_file(kv, path));
      continue;
    }
    int k = sg_kv_find(kv, name, nlen);
    if (k < 0)
      SG_RAISE(SG_ERR_CONFIG, "unknown option '--%.*s' (see --help)", (int)nlen,
               name);
    const char *value = NULL;
    if (eq) {
      value = eq + 1;
    } else if (kv->keys[k].type == SG_KV_BOOL &&
               (i + 1 >= argc || strncmp(argv[i + 1], "--", 2) == 0)) {
      value = "true";
    } else {
      if (i + 1 >= argc)
        SG_RAISE(SG_ERR_CONFIG, "option --%s needs a value", kv->keys[k].name);
      value = argv[++i];
    }
    SG_TRY(sg_kv_set_n(kv, name, nlen, value));
  }
fail:
  return st;
}

static int sg_kv_index(sg_kv_t kv, const char *key) {
  return kv && key ? sg_kv_find(kv, key, strlen(key)) : -1;
}

const char *sg_kv_str(sg_kv_t kv, const char *key) {
  int i = sg_kv_index(kv, key);
  return i < 0 ? "" : kv->values[i];
}

int64_t sg_kv_int(sg_kv_t kv, const char *key) {
  int i = sg_kv_index(kv, key);
  return i < 0 ? 0 : (int64_t)strtoll(kv->values[i], NULL, 10);
}

double sg_kv_float(sg_kv_t kv, const char *key) {
  int i = sg_kv_index(kv, key);
  return i < 0 ? 0.0 : strtod(kv->values[i], NULL);
}

int sg_kv_bool(sg_kv_t kv, const char *key) {
  int i = sg_kv_index(kv, key), b = 0;
  return i < 0 ? 0 : (sg_parse_bool(kv->values[i], &b) ? b : 0);
}

int sg_kv_is_set(sg_kv_t kv, const char *key) {
  int i = sg_kv_index(kv, key);
  return i < 0 ? 0 : kv->set[i];
}

void sg_kv_print_help(sg_kv_t kv, FILE *out) {
  for (int i = 0; i < kv->nkeys; ++i) {
    const sg_kv_key *k = &kv->keys[i];
    fprintf(out, "  --%-18s %-6s  %s", k->name, sg_kv_type_name(k->type),
            k->help ? k->help : "");
    if (k->def && *k->def) fprintf(out, " (default: %s)", k->def);
    fputc('\n', out);
  }
}

char *sg_kv_dump(sg_kv_t kv) {
  size_t cap = 1, len = 0;
  for (int i = 0; i < kv->nkeys; ++i)
    cap += strlen(kv->keys[i].name) + strlen(kv->values[i]) + 4;
  char *s = malloc(cap);
  if (!s) return NULL;
  s[0] = '\0';
  for (int i = 0; i < kv->nkeys; ++i)
    len += (size_t)snprintf(s + len, cap - len, "%s = %s\n", kv->keys[i].name,
                            kv->values[i]);
  return s;
}
