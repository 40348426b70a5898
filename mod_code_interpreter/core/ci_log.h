/*
 * ci_log.h - logging from httpd-free code. The glue installs a sink that
 * writes to httpd's error log (ci_log_set at start-up); without one, lines
 * are dropped. Every line starts with the module's unique tag (CInnnn) and
 * never holds a secret.
 */
#ifndef CI_LOG_H
#define CI_LOG_H

/* The levels, with syslog's numbers (httpd's APLOG_* are the same). */
typedef enum {
    CI_LOG_ERR = 3, CI_LOG_WARNING = 4, CI_LOG_NOTICE = 5, CI_LOG_INFO = 6,
    CI_LOG_DEBUG = 7
} ci_log_level;

typedef void ci_log_sink(ci_log_level level, const char *file, int line,
                         const char *message);

/* Lines go to SINK, those up to MAX_LEVEL only (the host's log level, as
 * md_log_set's level callback: a debug line is never formatted when the
 * host would drop it). */
void ci_log_set(ci_log_sink *sink, int max_level);
/* Whether a line at LEVEL would go anywhere (to skip building it). */
int ci_log_wants(ci_log_level level);
void ci_log_at(ci_log_level level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* A sink for the module's own processes (the sandbox supervisor, the
 * egress proxy): lines to descriptor 2, the error log when it is a file,
 * in httpd's format. */
void ci_log_stderr_sink(ci_log_level level, const char *file, int line,
                        const char *message);

#define ci_log(level, ...) ci_log_at(level, __FILE__, __LINE__, __VA_ARGS__)

#endif
