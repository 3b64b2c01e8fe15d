/* shardgrid — rank-aware logging.
 *
 * By default only world rank 0 prints, at level INFO. The level comes from
 * the environment variable SG_LOG_LEVEL (error, warn, info, debug, trace or
 * 0..4) and can be changed by a program (e.g. from --log-level). Messages go
 * to stderr as "[shardgrid LEVEL r0] text". Not collective.
 */
#ifndef SG_LOG_H
#define SG_LOG_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum sg_log_level {
  SG_LOG_LEVEL_ERROR = 0,
  SG_LOG_LEVEL_WARN,
  SG_LOG_LEVEL_INFO,
  SG_LOG_LEVEL_DEBUG,
  SG_LOG_LEVEL_TRACE
} sg_log_level;

/* Set the level; -1 re-reads SG_LOG_LEVEL. */
void sg_log_set_level(int level);
sg_log_level sg_log_get_level(void);

/* Parse "error|warn|info|debug|trace|0..4"; returns -1 if unknown. */
int sg_log_parse_level(const char *text);

/* Let every rank print (1) or rank 0 only (0, the default). */
void sg_log_set_all_ranks(int all);

void sg_log(sg_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Print on this rank whatever the rank filter says (level still applies). */
void sg_log_any(sg_log_level level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#define sg_log_error(...) sg_log(SG_LOG_LEVEL_ERROR, __VA_ARGS__)
#define sg_log_warn(...) sg_log(SG_LOG_LEVEL_WARN, __VA_ARGS__)
#define sg_log_info(...) sg_log(SG_LOG_LEVEL_INFO, __VA_ARGS__)
#define sg_log_debug(...) sg_log(SG_LOG_LEVEL_DEBUG, __VA_ARGS__)

#ifdef __cplusplus
}
#endif
#endif /* SG_LOG_H */
