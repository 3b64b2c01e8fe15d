/* sg_model_config_from_kv, the one reader of the model keys (sg-train,
 * sg-forecast, sg-plan): the kind's defaults under a table that lacks a
 * key or leaves it empty, the table's values over them, every invalid
 * value named in one error (and the rest still read), an unknown model
 * refused with *mc untouched. */
#include "sg_model.h"
#include "sg_test.h"

#include <string.h>

static const sg_kv_key keys[] = {
    {"model", SG_KV_STRING, "fno", ""},
    {"width", SG_KV_INT, "", ""},
    {"layers", SG_KV_INT, "3", ""},
    {"heads", SG_KV_INT, "2", ""},
    {"grid", SG_KV_BOOL, "false", ""},
    {"sp_mode", SG_KV_STRING, "ulysses", ""},
    {"activation_checkpointing", SG_KV_STRING, "every:2", ""},
    {"pad_y", SG_KV_STRING, "zero", ""},
    {"pad_x", SG_KV_STRING, "", ""},
};

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  sg_kv_t kv = NULL;
  SG_REQUIRE_OK(sg_kv_create(keys, (int)(sizeof keys / sizeof keys[0]), &kv));
  sg_model_config mc, def = sg_model_defaults(SG_MODEL_FNO);
  SG_CHECK_OK(sg_model_config_from_kv(kv, &mc));
  SG_CHECK(mc.kind == SG_MODEL_FNO && mc.width == def.width &&
               mc.modes == def.modes,
           "empty and absent keys keep the defaults (width %lld, modes %lld)",
           (long long)mc.width, (long long)mc.modes);
  SG_CHECK(mc.layers == 3 && mc.heads == 2 && mc.add_grid == 0 &&
               mc.sp_mode == SG_SP_ULYSSES && mc.act_ckpt_every == 2 &&
               mc.pad[0] == SG_BOUNDARY_ZERO && mc.pad[1] == def.pad[1],
           "the table's values read");
  /* every invalid value named, the others still read */
  SG_CHECK_OK(sg_kv_set(kv, "sp_mode", "cp"));
  SG_CHECK_OK(sg_kv_set(kv, "pad_x", "mirror"));
  SG_CHECK_OK(sg_kv_set(kv, "activation_checkpointing", "every:0"));
  SG_CHECK_STATUS(sg_model_config_from_kv(kv, &mc), SG_ERR_CONFIG);
  const char *e = sg_last_error();
  SG_CHECK(strstr(e, "sp_mode must be ring, ulysses or usp, not 'cp'") &&
               strstr(e, "pad_x must be periodic, zero, reflect or replicate, "
                         "not 'mirror'") &&
               strstr(e, "activation_checkpointing must be none, blocks or "
                         "every:K with K >= 1, not 'every:0'"),
           "every invalid value named: %s", e);
  SG_CHECK(mc.layers == 3 && mc.pad[0] == SG_BOUNDARY_ZERO,
           "the valid keys still read");
  /* an unknown model: refused, *mc as it was */
  SG_CHECK_OK(sg_kv_set(kv, "model", "resnet"));
  mc.width = -7;
  SG_CHECK_STATUS(sg_model_config_from_kv(kv, &mc), SG_ERR_CONFIG);
  SG_CHECK(mc.width == -7, "an unknown model leaves *mc alone");
  SG_CHECK_STATUS(sg_model_config_from_kv(NULL, &mc), SG_ERR_INVALID_ARG);
done:
  sg_kv_destroy(&kv);
  return sg_test_finish();
}
