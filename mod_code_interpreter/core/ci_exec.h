/*
 * ci_exec.h - what one execution produced, and the incremental NDJSON reader
 * that builds it. Both sandbox providers stream the same line protocol:
 *   {"type":"stdout"|"stderr","text":...}
 *   {"type":"result","is_main_result":bool,"text":...,"png":base64,...}
 *   {"type":"error","name":...,"value":...,"traceback":...}
 *   {"type":"keepalive"} {"type":"number_of_executions",...}
 *   {"type":"end_of_execution"}
 * plus, from the local kernel only, {"type":"dropped","bytes":N} (output the
 * kernel already discarded past the cap), {"type":"ready"} and
 * {"type":"files","changed":[NAME...]} (a container's files under /mnt/data
 * the execution created or changed); and for a hosted shell call, one line
 * per command that ran:
 *   {"type":"command","stdout":...,"stderr":...,"exit_code":N}
 *   {"type":"command","stdout":...,"stderr":...,"timeout":true}
 */
#ifndef CI_EXEC_H
#define CI_EXEC_H

#include <apr_pools.h>
#include <apr_tables.h>
#include "ci_declare.h"
#include <apr_time.h>

/* How an execution ended. */
typedef enum {
    CI_EXEC_COMPLETED = 0,  /* ran to the end */
    CI_EXEC_ERROR,          /* ran to the end and raised: the traceback is the
                               output, and the call is still completed */
    CI_EXEC_TIMED_OUT,      /* stopped at the tool's timeout */
    CI_EXEC_LOST,           /* the interpreter died, the stream was cut, or it
                               wrote more than the sandbox accepts */
    CI_EXEC_INTERRUPTED,    /* stopped because the request ended */
    CI_EXEC_NOT_RUN         /* refused before running (bad arguments, caps) */
} ci_exec_outcome;

/* One command of a hosted shell call, as it ended. */
typedef struct ci_command_result {
    const char *stdout_text;  /* what it wrote, cut with stderr_text at the
                                 call's max_output characters together */
    const char *stderr_text;
    int timed_out;            /* outcome "timeout": its process group was
                                 ended, and the commands after it did not run */
    int exit_code;            /* outcome "exit" (128+N: killed by signal N) */
} ci_command_result;

/* A hosted shell call's commands and their bounds (the model's timeout_ms
 * and max_output_length, capped by the tool's timeout= and max_output=). */
typedef struct ci_shell_action {
    const apr_array_header_t *commands;  /* const char *, at least one */
    apr_interval_time_t timeout;         /* each command's */
    apr_size_t max_output;               /* characters of each command's
                                            stdout and stderr together */
} ci_shell_action;

typedef struct ci_exec_result {
    ci_exec_outcome outcome;
    const char *failure;      /* why it failed, for the model; NULL unless failed */
    const char *text;         /* stdout, stderr, last value, traceback, in order,
                                 cut at max_output with a marker */
    apr_size_t text_len;
    apr_array_header_t *images; /* const char * data URLs (image/png) */
    apr_array_header_t *files;  /* const char * names of the files directly
                                   under /mnt/data the execution created or
                                   changed (a container's; NULL or empty:
                                   none), at most CI_EXEC_MAX_FILES */
    apr_array_header_t *commands; /* ci_command_result: a shell call's, one per
                                   command that ran, in order (NULL: code) */
    apr_interval_time_t duration;
    int failure_says_all;     /* FAILURE tells what became of the interpreter
                                 (a container's: kept, or restarted) */
} ci_exec_result;

#define CI_EXEC_MAX_FILES 100

/* The interpreter is gone (or never ran the code): the call failed. */
static inline int ci_exec_failed(const ci_exec_result *res)
{
    return res->outcome >= CI_EXEC_TIMED_OUT;
}

/* "completed", "error", "timed_out", "lost", "interrupted", "not_run". */
CI_DECLARE(const char *) ci_exec_outcome_name(ci_exec_outcome outcome);

/* A deep copy of RES in P. */
CI_DECLARE(ci_exec_result *) ci_exec_result_copy(apr_pool_t *p, const ci_exec_result *res);

/* What the model is told for RES (never empty). Memory from P. */
CI_DECLARE(const char *) ci_exec_model_text(apr_pool_t *p, const ci_exec_result *res);

/* Append TEXT (LEN bytes) to BUF (capacity CAP, *USED filled), cutting at a
 * UTF-8 character boundary; bytes that do not fit are added to *DROPPED. */
CI_DECLARE(void) ci_capped_append(char *buf, apr_size_t *used, apr_size_t cap,
                      const char *text, apr_size_t len, apr_size_t *dropped);

#endif
