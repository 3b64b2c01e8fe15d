/* Configuration: files, overrides, types, and clear errors. */
#include "sg_kv.h"
#include "sg_test.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const sg_kv_key keys[] = {
    {"mesh", SG_KV_STRING, "world=1", "device mesh"},
    {"steps", SG_KV_INT, "10", "training steps"},
    {"lr", SG_KV_FLOAT, "1e-3", "learning rate"},
    {"deterministic", SG_KV_BOOL, "false", "deterministic reductions"},
    {"weight_decay", SG_KV_FLOAT, "0", "AdamW weight decay"},
};
#define NKEYS ((int)(sizeof keys / sizeof keys[0]))

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_kv_t kv = NULL;
  char path[128];
  snprintf(path, sizeof path, "test_kv_%d.cfg", sg_test_rank);
  SG_REQUIRE_OK(sg_kv_create(keys, NKEYS, &kv));
  SG_CHECK(sg_kv_int(kv, "steps") == 10 && !sg_kv_is_set(kv, "steps"),
           "default");
  SG_CHECK(strcmp(sg_kv_str(kv, "mesh"), "world=1") == 0, "default string");

  FILE *f = fopen(path, "w");
  fprintf(
      f,
      "# a comment\nmesh = \"dp=2,h=2\"  # trailing\n\nsteps=20\nlr = 3e-4\n");
  fclose(f);
  SG_CHECK_OK(sg_kv_load_file(kv, path));
  SG_CHECK(strcmp(sg_kv_str(kv, "mesh"), "dp=2,h=2") == 0, "quoted value: %s",
           sg_kv_str(kv, "mesh"));
  SG_CHECK(sg_kv_int(kv, "steps") == 20 && sg_kv_is_set(kv, "steps"),
           "file int");
  SG_CHECK(sg_kv_float(kv, "lr") == 3e-4, "file float");

  char *args[] = {
      "prog",  "--steps", "30", "--deterministic", "--weight-decay=0.1",
      "--help"};
  const char *skip[] = {"--help", NULL};
  SG_CHECK_OK(sg_kv_parse_args(kv, 6, args, 1, skip));
  SG_CHECK(sg_kv_int(kv, "steps") == 30, "override");
  SG_CHECK(sg_kv_bool(kv, "deterministic") == 1, "bare bool");
  SG_CHECK(sg_kv_float(kv, "weight_decay") == 0.1, "dash for underscore and =");

  char *bad1[] = {"prog", "--stepz", "3"};
  SG_CHECK_STATUS(sg_kv_parse_args(kv, 3, bad1, 1, NULL), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "unknown option '--stepz'") != NULL, "%s",
           sg_last_error());
  char *bad2[] = {"prog", "--steps", "many"};
  SG_CHECK_STATUS(sg_kv_parse_args(kv, 3, bad2, 1, NULL), SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "'steps' expects an integer") != NULL, "%s",
           sg_last_error());
  char *bad3[] = {"prog", "--lr"};
  SG_CHECK_STATUS(sg_kv_parse_args(kv, 2, bad3, 1, NULL), SG_ERR_CONFIG);
  char *bad4[] = {"prog", "stray"};
  SG_CHECK_STATUS(sg_kv_parse_args(kv, 2, bad4, 1, NULL), SG_ERR_CONFIG);

  SG_CHECK_STATUS(sg_kv_load_string(kv, "steps = 1\nno equals here\n", "x.cfg"),
                  SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "x.cfg:2") != NULL, "line number: %s",
           sg_last_error());
  SG_CHECK_STATUS(sg_kv_load_string(kv, "colour = red\n", "y.cfg"),
                  SG_ERR_CONFIG);
  SG_CHECK(strstr(sg_last_error(), "y.cfg:1") &&
               strstr(sg_last_error(), "colour"),
           "%s", sg_last_error());
  SG_CHECK_STATUS(sg_kv_load_file(kv, "/nonexistent/file.cfg"), SG_ERR_IO);
  SG_CHECK_STATUS(sg_kv_set(kv, "lr", "nan"), SG_ERR_CONFIG);

  char *dump = sg_kv_dump(kv);
  SG_CHECK(dump && strstr(dump, "mesh = dp=2,h=2\n") &&
               strstr(dump, "deterministic = true\n"),
           "dump");
  free(dump);
  remove(path);
done:
  sg_kv_destroy(&kv);
  SG_CHECK(kv == NULL, "destroy sets NULL");
  return sg_test_finish();
}
