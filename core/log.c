/* shardgrid — rank-aware logging. */
#include "sg_log.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int sg_level = -1; /* -1: not read yet */
static int sg_all_ranks = 0;

static const char *const sg_level_names[] = {"error", "warn", "info", "debug",
                                             "trace"};

int sg_log_parse_level(const char *text) {
  if (!text || !*text) return -1;
  for (int i = 0; i < 5; ++i)
    if (strcasecmp(text, sg_level_names[i]) == 0) return i;
  if (text[0] >= '0' && text[0] <= '4' && text[1] == '\0') return text[0] - '0';
  return -1;
}

void sg_log_set_level(int level) {
  if (level < 0) {
    int l = sg_log_parse_level(getenv("SG_LOG_LEVEL"));
    sg_level = l < 0 ? SG_LOG_LEVEL_INFO : l;
  } else {
    sg_level = level > SG_LOG_LEVEL_TRACE ? SG_LOG_LEVEL_TRACE : level;
  }
}

sg_log_level sg_log_get_level(void) {
  if (sg_level < 0) sg_log_set_level(-1);
  return (sg_log_level)sg_level;
}

void sg_log_set_all_ranks(int all) { sg_all_ranks = all != 0; }

static int sg_log_rank(void) {
  int init = 0, fin = 0, rank = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

static void sg_vlog(int force, sg_log_level level, const char *fmt,
                    va_list ap) {
  if ((int)level > (int)sg_log_get_level()) return;
  int rank = sg_log_rank();
  if (!force && !sg_all_ranks && rank != 0) return;
  char buf[2048];
  vsnprintf(buf, sizeof buf, fmt, ap);
  static const char *const tag[] = {"ERROR", "WARN", "INFO", "DEBUG", "TRACE"};
  fprintf(stderr, "[shardgrid %s r%d] %s\n", tag[level], rank, buf);
}

void sg_log(sg_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sg_vlog(0, level, fmt, ap);
  va_end(ap);
}

void sg_log_any(sg_log_level level, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  sg_vlog(1, level, fmt, ap);
  va_end(ap);
}
