/* sg-plan's mesh check over a table of meshes (issue 19 §1): each row a
 * model config, a grid, a mesh and the violations its message must name
 * (all of them, not the first), or none. Pure logic: one rank, no run. */
#include "keys.h"
#include "sg_plan.h"
#include "sg_test.h"

#include <stdio.h>
#include <string.h>

typedef struct row {
  const char *cfg; /* "key = value" lines over sg-train's defaults */
  int64_t ny, nx;
  int ranks;
  const char *mesh;
  const char *want[4]; /* substrings of the message; none: the mesh fits */
} row;

static const row rows[] = {
    /* fits */
    {"model = fno\nbatch = 8", 32, 32, 4, "dp=2,h=2", {NULL}},
    {"model = fno\nbatch = 8\nzero = 1", 32, 32, 4, "fsdp=2,w=2", {NULL}},
    {"model = cnn\nbatch = 4", 32, 32, 4, "h=2,w=2", {NULL}},
    {"model = unet\nlevels = 3\nbatch = 4", 32, 32, 2, "h=2", {NULL}},
    {"model = vit\nbatch = 4\npatch = 4\nheads = 4",
     32,
     32,
     4,
     "tp=2,h=2",
     {NULL}},
    {"model = fno\nlayers = 2\nbatch = 8\nmicrobatches = 2",
     32,
     32,
     4,
     "pp=2,dp=2",
     {NULL}},
    /* the FNO's tensor parallelism: any split of the width >= tp */
    {"model = fno\nwidth = 8\nbatch = 4", 32, 32, 4, "tp=2,h=2", {NULL}},
    {"model = fno\nwidth = 8\nbatch = 4", 32, 32, 6, "dp=2,tp=3", {NULL}},
    /* under tp its 3 layers are 2 pipeline pieces (a pair, the last one) */
    {"model = fno\nlayers = 3\nbatch = 4", 32, 32, 8, "pp=4,tp=2", {NULL}},
    {"model = fno\nlayers = 3\nbatch = 4",
     32,
     32,
     10,
     "pp=5,tp=2",
     {"the model has 4 blocks"}},
    {"model = fno\nwidth = 2",
     32,
     32,
     3,
     "tp=3",
     {"width (2) must be >= tp (3)"}},
    /* the conv nets' tensor parallelism: whole GroupNorm groups per tp rank
     * (groups >= tp; uneven: 4 groups on tp = 3 are 2+1+1) */
    {"model = cnn\nwidth = 8\ngroups = 4\nbatch = 4",
     32,
     32,
     4,
     "tp=2,h=2",
     {NULL}},
    {"model = unet\nwidth = 8\ngroups = 4\nbatch = 4",
     32,
     32,
     6,
     "dp=2,tp=3",
     {NULL}},
    {"model = unet\nwidth = 8\ngroups = 2\nbatch = 4",
     32,
     32,
     3,
     "tp=3",
     {"U-Net: groups (2) must be >= tp (3)"}},
    /* one violation each */
    {"model = fno", 32, 32, 4, "dp=2,x=2", {"mesh dim 'x' has no role"}},
    {"model = fno", 32, 32, 4, "dp=2,h=3", {"6 ranks", "the run 4"}},
    {"model = fno\nbatch = 6",
     32,
     32,
     4,
     "dp=4",
     {"global batch 6 is not divisible by the 4"}},
    {"model = fno\nbatch = 8", 32, 32, 2, "fsdp=2", {"set zero = 1"}},
    {"model = fno\nbatch = 8\nzero = 1",
     32,
     32,
     2,
     "dp=2",
     {"this mesh has neither"}},
    {"model = vit\nheads = 4\nwidth = 32",
     32,
     32,
     3,
     "tp=3",
     {"heads (4) must be divisible by tp (3)"}},
    /* the ViT's tp_sequence (Megatron-SP): fits on tp x h and with pp
     * (whole tokens between the stages); not with fewer tokens than tp
     * ranks (8x8 grid, patch 4: 4 tokens) */
    {"model = vit\nheads = 4\ntp_sequence = true\nbatch = 4",
     32,
     32,
     4,
     "tp=2,h=2",
     {NULL}},
    {"model = vit\nheads = 2\ntp_sequence = true\nbatch = 4",
     32,
     32,
     4,
     "pp=2,tp=2",
     {NULL}},
    {"model = vit\nheads = 8\nwidth = 32\ntp_sequence = true",
     8,
     8,
     8,
     "tp=8",
     {"tp_sequence needs at least one token per tp rank (4 tokens"}},
    /* the sp dim: the vit only; fits with h, tp, fsdp, pp (the triple
     * pp=2,tp=2,sp=2) and tp_sequence (the tp slices of each sp piece: a
     * token per tp rank in the smallest piece); not fewer tokens than sp
     * ranks, nor Ulysses heads not divisible by h x sp */
    {"model = vit\nheads = 2\nbatch = 4", 32, 32, 4, "sp=2,h=2", {NULL}},
    {"model = vit\nheads = 2\nbatch = 4\nzero = 3",
     32,
     32,
     4,
     "fsdp=2,sp=2",
     {NULL}},
    {"model = vit\nheads = 2\nbatch = 4", 32, 32, 4, "tp=2,sp=2", {NULL}},
    /* experts with the sp dim (on the tokens gathered over sp) */
    {"model = vit\nheads = 2\nmoe_experts = 2\nbatch = 4",
     32,
     32,
     4,
     "ep=2,sp=2",
     {NULL}},
    /* the samples over dp (fsdp) and ep on a split domain */
    {"model = vit\nheads = 2\nmoe_experts = 2\nbatch = 4",
     32,
     32,
     8,
     "dp=2,ep=2,h=2",
     {NULL}},
    /* the experts over ep inside each pipeline stage */
    {"model = vit\nheads = 2\nmoe_experts = 2\nbatch = 4\nmicrobatches = 2",
     32,
     32,
     4,
     "pp=2,ep=2",
     {NULL}},
    {"model = swin\nbatch = 4\npatch = 2",
     32,
     32,
     2,
     "sp=2",
     {"swin: mesh dim 'sp' (size 2) splits the token sequence"}},
    {"model = vit\nheads = 2\nbatch = 4\nmicrobatches = 2",
     32,
     32,
     8,
     "pp=2,tp=2,sp=2",
     {NULL}},
    {"model = vit\nheads = 2\ntp_sequence = true\nbatch = 4",
     32,
     32,
     4,
     "tp=2,sp=2",
     {NULL}},
    {"model = vit\nheads = 4\ntp_sequence = true\nbatch = 4",
     8,
     8,
     8,
     "tp=4,sp=2",
     {"at least one token per tp rank (2 tokens on the smallest sp piece"}},
    {"model = vit\nheads = 2\nbatch = 4",
     8,
     8,
     8,
     "sp=8",
     {"at least one token per sp rank (4 tokens"}},
    {"model = vit\nheads = 2\nbatch = 4\nsp_mode = ulysses",
     32,
     32,
     4,
     "sp=2,h=2",
     {"(1 x 4: h, w and sp)"}},
    {"model = cnn\ngroups = 1",
     32,
     32,
     2,
     "tp=2",
     {"CNN: groups (1) must be >= tp (2)"}},
    {"model = fno\nlayers = 1", 32, 32, 4, "pp=4", {"the model has 3 blocks"}},
    {"model = cnn\nkernel = 11",
     16,
     16,
     4,
     "h=4",
     {"h = 4", "thinner than a halo"}},
    {"model = fno", 16, 16, 1, "dp=1", {"modes 12 do not fit"}},
    {"model = vit\npatch = 8",
     32,
     32,
     8,
     "h=8",
     {"patch 8 is larger than the smallest shard"}},
    {"model = vit\npatch = 5",
     32,
     32,
     1,
     "dp=1",
     {"is not divisible by patch 5"}},
    {"model = fno\nbatch = 8\nmicrobatches = 3",
     32,
     32,
     2,
     "pp=2",
     {"microbatches = 3 must be >= 1 and divide"}},
    /* FNO-3D: its modes against the grid and the padded time axis; no tp,
     * no pp; y and x split like the FNO's (uneven too) */
    {"model = fno3d\nout_frames = 8\nmodes = 4\nmodes_t = 2\npad_t = 2\n"
     "batch = 4",
     16,
     16,
     4,
     "dp=2,h=2",
     {NULL}},
    {"model = fno3d\nout_frames = 8\nmodes = 4\nmodes_t = 2\nbatch = 4",
     16,
     16,
     3,
     "w=3",
     {NULL}},
    {"model = fno3d\nout_frames = 8\nmodes = 9\nmodes_t = 6\npad_t = 2\n"
     "batch = 4",
     16,
     16,
     4,
     "tp=2,pp=2",
     {"FNO-3D: modes 9 do not fit a 16x16 grid",
      "FNO-3D: modes_t 6 do not fit 8 output frames + 2 padding",
      "FNO-3D: mesh dim 'tp' (size 2): this model has no tensor parallelism",
      "FNO-3D: mesh dim 'pp': the model has no pipeline pieces yet"}},
    /* several at once: every one named */
    {"model = cnn\nbatch = 6\ngroups = 1",
     32,
     32,
     4,
     "tp=2,dp=4",
     {"8 ranks", "groups (1) must be >= tp (2)",
      "global batch 6 is not divisible"}},
    {"model = vit\nheads = 4\npatch = 8\nbatch = 4",
     32,
     32,
     8,
     "fsdp=2,tp=3,h=8",
     {"set zero = 1", "heads (4) must be divisible by tp (3)",
      "patch 8 is larger", "48 ranks"}},
    {"model = unet\nlevels = 4\nbatch = 3",
     32,
     32,
     8,
     "dp=2,h=8",
     {"batch 3", "thinner than a halo"}},
};

static void one_row(sg_kv_t kv, const row *r) {
  char why[4096];
  SG_CHECK_OK(sg_kv_load_string(kv, r->cfg, "row"));
  sg_plan_mesh m;
  SG_CHECK_OK(sg_plan_mesh_parse(r->mesh, &m));
  sg_plan_problem pb = {
      .cfg = kv, .ny = r->ny, .nx = r->nx, .vars = 1, .ranks = r->ranks};
  sg_status st = sg_plan_check(&pb, &m, why, sizeof why);
  if (!r->want[0]) {
    SG_CHECK(st == SG_OK && !why[0], "%s on %s: should fit, got: %s", r->mesh,
             r->cfg, why);
    return;
  }
  SG_CHECK(st == SG_ERR_CONFIG, "%s on %s: should not fit", r->mesh, r->cfg);
  SG_CHECK(strstr(sg_last_error(), why) != NULL, "message and error differ");
  for (int i = 0; i < 4 && r->want[i]; ++i)
    SG_CHECK(strstr(why, r->want[i]) != NULL, "%s on %s: '%s' not named in: %s",
             r->mesh, r->cfg, r->want[i], why);
  printf("%-18s %s\n", r->mesh, why);
}

static void table(void) {
  for (size_t i = 0; i < sizeof rows / sizeof *rows; ++i) {
    sg_kv_t kv = NULL;
    SG_CHECK_OK(sg_kv_create(sg_train_keys, sg_train_nkeys, &kv));
    one_row(kv, &rows[i]);
    sg_kv_destroy(&kv);
  }
}

static void parse(void) {
  sg_plan_mesh m;
  SG_CHECK_OK(sg_plan_mesh_parse("pp=2,fsdp=2,h=2", &m));
  SG_CHECK(m.ndims == 3 && sg_plan_mesh_ranks(&m) == 8 &&
               sg_plan_mesh_dim(&m, "fsdp") == 2 &&
               sg_plan_mesh_dim(&m, "w") == 1,
           "parse pp=2,fsdp=2,h=2");
  char buf[64];
  sg_plan_mesh_format(&m, buf, sizeof buf);
  SG_CHECK(!strcmp(buf, "pp=2,fsdp=2,h=2"), "format: %s", buf);
  static const char *const bad[] = {"h",  "h=0",  "h=2,",
                                    "=2", "h=2x", "toolongname=2"};
  for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i)
    SG_CHECK(sg_plan_mesh_parse(bad[i], &m) == SG_ERR_CONFIG, "'%s' parsed",
             bad[i]);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  parse();
  table();
  return sg_test_finish();
}
