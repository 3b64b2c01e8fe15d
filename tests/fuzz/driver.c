/* Replays fuzz inputs without libFuzzer (built with the normal compiler):
 *   fuzz_regress_<target> DIR|FILE...
 * calls LLVMFuzzerInitialize (when the target has one) and then
 * LLVMFuzzerTestOneInput on every file (directories: every regular file
 * in them, in name order). A crash or an abort of the target fails the
 * test; an empty or missing directory is an error too, so that a
 * misplaced corpus does not pass silently. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

static int run_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    return 1;
  }
  size_t cap = 1 << 16, n = 0, r;
  uint8_t *buf = malloc(cap);
  while (buf && (r = fread(buf + n, 1, cap - n, f)) > 0) {
    n += r;
    if (n == cap) {
      uint8_t *t = realloc(buf, cap *= 2);
      if (!t) {
        free(buf);
        buf = NULL;
      }
      buf = t;
    }
  }
  fclose(f);
  if (!buf) return 1;
  printf("  %s (%zu bytes)\n", path, n);
  fflush(stdout);
  LLVMFuzzerTestOneInput(buf, n);
  free(buf);
  return 0;
}

static int cmp(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

int main(int argc, char **argv) {
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  int bad = 0, files = 0;
  for (int i = 1; i < argc; ++i) {
    struct stat sb;
    if (stat(argv[i], &sb) != 0) {
      fprintf(stderr, "no such file or directory: %s\n", argv[i]);
      bad = 1;
      continue;
    }
    if (!S_ISDIR(sb.st_mode)) {
      bad |= run_file(argv[i]);
      ++files;
      continue;
    }
    DIR *d = opendir(argv[i]);
    if (!d) {
      bad = 1;
      continue;
    }
    char **names = NULL;
    size_t nn = 0;
    for (struct dirent *e; (e = readdir(d));) {
      if (e->d_name[0] == '.') continue;
      char **t = realloc(names, (nn + 1) * sizeof *names);
      if (!t) break;
      names = t;
      names[nn] = malloc(strlen(argv[i]) + strlen(e->d_name) + 2);
      if (names[nn]) sprintf(names[nn++], "%s/%s", argv[i], e->d_name);
    }
    closedir(d);
    qsort(names, nn, sizeof *names, cmp);
    for (size_t k = 0; k < nn; ++k) {
      if (stat(names[k], &sb) == 0 && S_ISREG(sb.st_mode)) {
        bad |= run_file(names[k]);
        ++files;
      }
      free(names[k]);
    }
    free(names);
  }
  printf("%d inputs replayed%s\n", files, bad ? ", with errors" : "");
  if (files == 0) bad = 1;
  return bad;
}
