/* A run killed during a checkpoint write leaves the previous checkpoint
 * loadable — with a real kill, not a simulated stale file (issue 6, "Must
 * show"). Two steps joined by a CTest fixture:
 *   "write PATH DELAY_MS" (2 ranks): writes the checkpoints of steps 1, 2,
 *     3, ... of a 32 MiB array over the same path; from step 3 on, a
 *     watcher thread on every rank waits until the temporary file
 *     PATH.tmp of the write in progress exists, sleeps DELAY_MS and sends
 *     SIGKILL to its own process: the run dies inside a checkpoint write
 *     (after the temporary file is created, before it is renamed; where
 *     exactly depends on DELAY_MS);
 *   "check PATH" (1-3 ranks): the temporary file of the killed write is
 *     there, and the checkpoint at PATH loads, its checksums hold, and it
 *     is the complete checkpoint of some step s >= 2: every value equals
 *     what step s wrote. */
#include "sg_ckpt.h"
#include "sg_test.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

enum { NY = 2048, NX = 4096 }; /* 32 MiB of f32 */

static float value(int64_t step, int64_t y, int64_t x) {
  return (float)((step * 7919 + y * NX + x) % 1000003);
}

static atomic_int armed;
static char tmp_path[1100];
static int delay_ms = 20;

static void sleep_ms(double ms) {
  struct timespec ts = {(time_t)(ms / 1000),
                        (long)((ms - 1000 * (time_t)(ms / 1000)) * 1e6)};
  nanosleep(&ts, NULL);
}

static void *watcher(void *arg) {
  (void)arg;
  for (;;) {
    if (atomic_load(&armed) && access(tmp_path, F_OK) == 0) {
      sleep_ms(delay_ms);
      kill(getpid(), SIGKILL);
    }
    sleep_ms(0.2);
  }
  return NULL;
}

static void fill(int64_t step, const sg_nc_shard *s, float *buf) {
  for (int64_t y = 0; y < s->count[0]; ++y)
    for (int64_t x = 0; x < s->count[1]; ++x)
      buf[y * s->count[1] + x] = value(step, s->start[0] + y, s->start[1] + x);
}

int main(int argc, char **argv) {
  sg_test_init(&argc, &argv);
  if (argc < 3 || (strcmp(argv[1], "write") && strcmp(argv[1], "check"))) {
    SG_CHECK(0, "usage: test_ckpt_kill write PATH DELAY_MS | check PATH");
    return sg_test_finish();
  }
  if (!sg_nc_backend_available(SG_NC_BACKEND_AUTO, 1)) {
    sg_test_skip("no parallel NetCDF backend built");
    return sg_test_finish();
  }
  const char *path = argv[2];
  int64_t shape[2] = {NY, NX};
  sg_ckpt_array a;
  a.name = "w";
  /* the writer splits rows, the checker columns */
  sg_nc_shard_split(2, shape, SG_DTYPE_F32, argv[1][0] == 'w' ? 0 : 1,
                    sg_test_size, sg_test_rank, &a.shard);
  float *buf = malloc(sizeof(float) *
                      (size_t)(sg_nc_shard_numel(&a.shard) + 1));
  a.data = buf;
  sg_ckpt_meta m;
  memset(&m, 0, sizeof m);
  if (argv[1][0] == 'w') {
    delay_ms = argc > 3 ? atoi(argv[3]) : 20;
    snprintf(tmp_path, sizeof tmp_path, "%s.tmp", path);
    snprintf(m.mesh, sizeof m.mesh, "h=%d", sg_test_size);
    if (sg_test_rank == 0) { /* nothing from an earlier run */
      remove(tmp_path);
      remove(path);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    pthread_t th;
    SG_REQUIRE_OK(pthread_create(&th, NULL, watcher, NULL) == 0
                      ? SG_OK
                      : SG_ERR_INTERNAL);
    for (m.step = 1;; ++m.step) {
      fill(m.step, &a.shard, buf);
      if (m.step == 3) {
        if (sg_test_rank == 0) {
          printf("steps 1-2 written; the write of step 3 gets killed %d ms "
                 "after %s appears\n",
                 delay_ms, tmp_path);
          fflush(stdout);
        }
        atomic_store(&armed, 1);
      }
      SG_REQUIRE_OK(sg_ckpt_write(MPI_COMM_WORLD, path, 1, &a, &m, NULL));
      if (m.step >= 3 && sg_test_rank == 0) {
        printf("step %lld completed before the kill\n", (long long)m.step);
        fflush(stdout);
      }
    }
  } else {
    char t[1100];
    snprintf(t, sizeof t, "%s.tmp", path);
    SG_CHECK(access(t, F_OK) == 0,
             "%s is missing: the run was not killed inside a write", t);
    SG_REQUIRE_OK(sg_ckpt_read(MPI_COMM_WORLD, path, 1, &a, &m));
    int64_t bad = 0;
    for (int64_t y = 0; y < a.shard.count[0]; ++y)
      for (int64_t x = 0; x < a.shard.count[1]; ++x)
        bad += buf[y * a.shard.count[1] + x] !=
               value(m.step, a.shard.start[0] + y, a.shard.start[1] + x);
    SG_CHECK(m.step >= 2 && bad == 0,
             "checkpoint of step %lld: %lld values differ from that step's",
             (long long)m.step, (long long)bad);
    if (sg_test_rank == 0)
      printf("loaded the complete checkpoint of step %lld\n",
             (long long)m.step);
    free(m.config);
  }
done:
  free(buf);
  return sg_test_finish();
}
