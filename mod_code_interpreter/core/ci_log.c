/* ci_log.c - logging from httpd-free code through the sink the glue set. */
#include <stdarg.h>
#include <apr_strings.h>
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
