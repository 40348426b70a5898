/* ci_log.c - logging from httpd-free code through the sink the glue set. */
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
#include <apr_strings.h>
#include <apr_time.h>
#include "ci_log.h"

static ci_log_sink *log_sink;
static int log_max = CI_LOG_DEBUG;

void ci_log_set(ci_log_sink *sink, int max_level)
{
    log_sink = sink;
    log_max = max_level;
}

int ci_log_wants(ci_log_level level)
{
    return log_sink && (int)level <= log_max;
}

void ci_log_at(ci_log_level level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    if (!ci_log_wants(level))
        return;
    va_start(ap, fmt);
    apr_vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log_sink(level, file, line, msg);
}

void ci_log_stderr_sink(ci_log_level level, const char *file, int line,
                        const char *message)
{
    static const char *const names[] = { "emerg", "alert", "crit", "error", "warn",
                                         "notice", "info", "debug" };
    char date[APR_CTIME_LEN];
    char buf[1200];
    int n;
    (void)file;
    (void)line;
    apr_ctime(date, apr_time_now());
    n = snprintf(buf, sizeof(buf), "[%s] [code_interpreter:%s] [pid %ld] %s\n", date,
                 names[level & 7], (long)getpid(), message);
    if (n > 0)
        (void)!write(2, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}
