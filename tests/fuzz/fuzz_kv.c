/* libFuzzer target: config text and command-line options (core/kv.c) with
 * a key table of every kind sg-train has (string, int, float, bool).
 *
 * The input is taken as a config file (sg_kv_load_string, as sg_kv_load_file
 * does after its checks) and, split at newlines, as argv
 * (sg_kv_parse_args; "--config" arguments are dropped so that no file named
 * by the input is opened); then every getter and the dump run, and the
 * "mesh" value goes through sg_mesh_spec_parse as sg-train does. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sg_kv.h"
#include "sg_mesh.h"

static const sg_kv_key keys[] = {
    /* the kinds of key sg-train has (its real table: examples/sg-train/main.c) */
    {"mesh", SG_KV_STRING, "", "device mesh"},
    {"zero", SG_KV_INT, "0", "an int"},
    {"zero_over_domain", SG_KV_BOOL, "false", "a bool"},
    {"lr", SG_KV_FLOAT, "1e-3", "a float"},
    {"pad_y", SG_KV_STRING, "periodic", "a string with a default"},
    {"data", SG_KV_STRING, "", "an empty default"},
    /* and two of other shapes */
    {"a", SG_KV_STRING, "", "a one-letter key"},
    {"b-c", SG_KV_INT, "", "a key with '-' and no default"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 1 << 16) return 0;
  char *text = malloc(size + 1);
  char *args = malloc(size + 1);
  char **argv = malloc((size + 3) * sizeof *argv); /* prog, lines, NULL */
  sg_kv_t kv = NULL;
  if (!text || !args || !argv) goto done;
  memcpy(text, data, size);
  text[size] = '\0'; /* a NUL inside ends the text, as for a C string */
  if (sg_kv_create(keys, NKEYS, &kv) != SG_OK) abort();
  (void)sg_kv_load_string(kv, text, "fuzz.cfg");

  /* the same bytes as arguments, one per line */
  memcpy(args, text, size + 1);
  int argc = 0;
  argv[argc++] = "prog";
  for (char *s = args, *n; s; s = n) {
    n = strchr(s, '\n');
    if (n) *n++ = '\0';
    if (strncmp(s, "--config", 8) == 0) continue;
    argv[argc++] = s;
  }
  argv[argc] = NULL;
  static const char *const skip[] = {"--help", NULL};
  (void)sg_kv_parse_args(kv, argc, argv, 1, skip);

  for (int i = 0; i < NKEYS; ++i) {
    const char *k = keys[i].name;
    switch (keys[i].type) {
    case SG_KV_INT: (void)sg_kv_int(kv, k); break;
    case SG_KV_FLOAT: (void)sg_kv_float(kv, k); break;
    case SG_KV_BOOL: (void)sg_kv_bool(kv, k); break;
    default: (void)strlen(sg_kv_str(kv, k)); break;
    }
    (void)sg_kv_is_set(kv, k);
  }
  free(sg_kv_dump(kv));
  sg_mesh_spec spec;
  (void)sg_mesh_spec_parse(sg_kv_str(kv, "mesh"), &spec);
done:
  sg_kv_destroy(&kv);
  free(argv);
  free(args);
  free(text);
  return 0;
}
