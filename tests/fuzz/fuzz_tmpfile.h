/* Fuzz targets that need a file on disk: MPI_Init once (MPI_COMM_SELF is
 * all they use) and one temporary file per process, rewritten per input. */
#ifndef SG_FUZZ_TMPFILE_H
#define SG_FUZZ_TMPFILE_H

#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char sg_fuzz_path[4096];

static void sg_fuzz_cleanup(void) {
  if (sg_fuzz_path[0]) unlink(sg_fuzz_path);
  int init = 0, fin = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Finalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
  int init = 0;
  MPI_Initialized(&init);
  if (!init) MPI_Init(argc, argv);
  const char *dir = getenv("TMPDIR");
  snprintf(sg_fuzz_path, sizeof sg_fuzz_path, "%s/sg_fuzz_XXXXXX",
           dir && *dir ? dir : "/tmp");
  int fd = mkstemp(sg_fuzz_path);
  if (fd < 0) {
    perror("mkstemp");
    abort();
  }
  close(fd);
  atexit(sg_fuzz_cleanup);
  return 0;
}

/* Write the input to the temporary file; its path, or NULL. */
static const char *sg_fuzz_write(const unsigned char *data, size_t size) {
  FILE *f = fopen(sg_fuzz_path, "wb");
  if (!f) return NULL;
  int ok = fwrite(data, 1, size, f) == size;
  ok = (fclose(f) == 0) && ok;
  return ok ? sg_fuzz_path : NULL;
}

#endif
