/* libFuzzer target: config text and command-line options (core/kv.c) with
 * a key table like sg-train's (every type: string, int, float, bool).
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
    /* sg-train's table (examples/sg-train/main.c) */
    {"mesh", SG_KV_STRING, "", "device mesh over dp (samples), fsdp (samples, ZeRO-sharded state), h (y), w (x); "
     "default h=<ranks>"},
    {"zero", SG_KV_INT, "0",
     "ZeRO stage over the fsdp dim: 0 (DDP) | 1 (optimizer state sharded) | 2 (+ gradients) | 3 (+ parameters)"},
    {"zero_over_domain", SG_KV_BOOL, "false", "ZeRO also shards over the domain dims h, w"},
    {"grad_accum", SG_KV_INT, "1", "micro-batches per step (gradients accumulate; one reduction per step)"},
    {"bucket_mib", SG_KV_FLOAT, "25", "DDP gradient bucket size in MiB"},
    {"model", SG_KV_STRING, "fno", "model: fno | cnn (ResNet-style) | unet"},
    {"width", SG_KV_INT, "32", "channels (fno, cnn); channels at full resolution (unet)"},
    {"modes", SG_KV_INT, "12", "fno: modes kept per dim"},
    {"layers", SG_KV_INT, "4", "fno: spectral layers"},
    {"proj_width", SG_KV_INT, "128", "fno, cnn: projection hidden channels"},
    {"blocks", SG_KV_INT, "4", "cnn: residual blocks (conv-GroupNorm-act-conv + skip)"},
    {"levels", SG_KV_INT, "3", "unet: resolutions (grid divisible by 2^(levels-1))"},
    {"kernel", SG_KV_INT, "3", "cnn, unet: odd convolution kernel size"},
    {"groups", SG_KV_INT, "4", "cnn, unet: GroupNorm groups (divides width)"},
    {"pad_y", SG_KV_STRING, "periodic", "cnn, unet: boundary in y: periodic | zero | reflect | replicate"},
    {"pad_x", SG_KV_STRING, "periodic", "cnn, unet: boundary in x: periodic | zero | reflect | replicate"},
    {"grid", SG_KV_BOOL, "true", "append the (x, y) coordinates as two input channels"},
    {"shard_spectral", SG_KV_BOOL, "true",
     "fno: spectral weights sharded by modes over the domain ranks (false: replicated)"},
    {"data", SG_KV_STRING, "", "NetCDF dataset: var(sample, time, y, x) or var(time, lat, lon)"},
    {"vars", SG_KV_STRING, "vorticity", "comma-separated variables (channels)"},
    {"reject_nonfinite", SG_KV_BOOL, "false",
     "NaN/Inf data values that are not _FillValue: false = missing points (masked), true = reject the file"},
    {"dim_map", SG_KV_STRING, "", "map non-CF dim names, e.g. TIME=time,LAT=lat"},
    {"backend", SG_KV_STRING, "auto", "NetCDF backend for reading: auto | pnetcdf | netcdf4 | serial"},
    {"history", SG_KV_INT, "1", "input frames"},
    {"lead", SG_KV_INT, "1", "frames ahead of the last input that the model predicts"},
    {"test_samples", SG_KV_INT, "4", "samples held out for testing (sample datasets)"},
    {"test_frames", SG_KV_INT, "12", "final frames held out for testing (time-series datasets)"},
    {"batch", SG_KV_INT, "8", "global batch (divisible by the dp size)"},
    {"steps", SG_KV_INT, "100", "optimizer steps (ignored when epochs > 0)"},
    {"epochs", SG_KV_INT, "0", "epochs over the training examples (0: use steps)"},
    {"lr", SG_KV_FLOAT, "1e-3", "peak learning rate"},
    {"min_lr", SG_KV_FLOAT, "0", "final learning rate (cosine)"},
    {"schedule", SG_KV_STRING, "cosine", "constant | cosine | step"},
    {"warmup", SG_KV_INT, "0", "warm-up steps"},
    {"step_size", SG_KV_INT, "100", "steps per decay (schedule step)"},
    {"gamma", SG_KV_FLOAT, "0.5", "decay factor (schedule step)"},
    {"weight_decay", SG_KV_FLOAT, "1e-4", "AdamW weight decay"},
    {"clip", SG_KV_FLOAT, "0", "clip gradients to this global norm (0: off)"},
    {"loss", SG_KV_STRING, "rel_l2", "rel_l2 | mse (masked values are left out)"},
    {"seed", SG_KV_INT, "0", "seed of initialisation and data order"},
    {"deterministic", SG_KV_BOOL, "false", "fixed-order reductions: same bits on every run"},
    {"eval_every", SG_KV_INT, "0", "evaluate on the test examples every N steps (0: at the end)"},
    {"rollout", SG_KV_INT, "0", "autoregressive rollout frames in the final evaluation (sample datasets)"},
    {"check_every", SG_KV_INT, "0", "check every N steps that replicas hold identical parameters"},
    {"log_every", SG_KV_INT, "1", "print a line every N steps"},
    {"metrics", SG_KV_STRING, "", "write JSON lines here"},
    {"trace", SG_KV_STRING, "", "write a Chrome-trace timeline here"},
    {"predict", SG_KV_STRING, "", "write test predictions and targets to this NetCDF file"},
    {"ckpt_dir", SG_KV_STRING, "", "directory for checkpoints"},
    {"ckpt_every", SG_KV_INT, "0", "checkpoint every N steps (0: only at the end when ckpt_dir is set)"},
    {"resume", SG_KV_STRING, "", "resume from this checkpoint"},
    {"log_level", SG_KV_STRING, "info", "error | warn | info | debug"},
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
