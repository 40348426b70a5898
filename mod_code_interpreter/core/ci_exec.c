/*
 * ci_exec.c - an execution's result and outcome, and what the model is told
 * of it (ci_exec.h); the stream is read by ci_ndjson.c.
 */
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_exec.h"
#include "ci_cfiles.h"
#include "ci_json.h"

void ci_capped_append(char *buf, apr_size_t *used, apr_size_t cap,
                      const char *text, apr_size_t len, apr_size_t *dropped)
{
    apr_size_t room = cap > *used ? cap - *used : 0;
    apr_size_t take = len < room ? len : room;
    /* Never split a UTF-8 sequence: back up over continuation bytes. */
    if (take < len)
        while (take > 0 && ((unsigned char)text[take] & 0xC0) == 0x80)
            take--;
    memcpy(buf + *used, text, take);
    *used += take;
    *dropped += len - take;
}

/* S with every NUL replaced by U+FFFD (the text travels as C strings). */
const char *ci_exec_outcome_name(ci_exec_outcome outcome)
{
    static const char *const names[] = { "completed", "error", "timed_out", "lost",
                                         "interrupted", "not_run" };
    return (unsigned)outcome < sizeof(names) / sizeof(names[0]) ? names[outcome]
                                                                : "unknown";
}

ci_exec_result *ci_exec_result_copy(apr_pool_t *p, const ci_exec_result *res)
{
    ci_exec_result *r = apr_pmemdup(p, res, sizeof(*r));
    int i;
    r->text = apr_pstrmemdup(p, res->text ? res->text : "", res->text_len);
    r->failure = res->failure ? apr_pstrdup(p, res->failure) : NULL;
    r->images = apr_array_make(p, res->images && res->images->nelts ? res->images->nelts : 1,
                               sizeof(const char *));
    for (i = 0; res->images && i < res->images->nelts; i++)
        *(const char **)apr_array_push(r->images) =
            apr_pstrdup(p, APR_ARRAY_IDX(res->images, i, const char *));
    r->files = apr_array_make(p, res->files && res->files->nelts ? res->files->nelts : 1,
                              sizeof(const char *));
    for (i = 0; res->files && i < res->files->nelts; i++)
        *(const char **)apr_array_push(r->files) =
            apr_pstrdup(p, APR_ARRAY_IDX(res->files, i, const char *));
    if (res->commands) {
        r->commands = apr_array_make(p, res->commands->nelts ? res->commands->nelts : 1,
                                     sizeof(ci_command_result));
        for (i = 0; i < res->commands->nelts; i++) {
            const ci_command_result *c = &APR_ARRAY_IDX(res->commands, i,
                                                        ci_command_result);
            ci_command_result *to = apr_array_push(r->commands);
            *to = *c;
            to->stdout_text = apr_pstrdup(p, c->stdout_text ? c->stdout_text : "");
            to->stderr_text = apr_pstrdup(p, c->stderr_text ? c->stderr_text : "");
        }
    }
    return r;
}

/* The files the execution wrote, for the model: their paths, and how to
 * link to one (the link becomes a container_file_citation). "" for none. */
static const char *files_line(apr_pool_t *p, const ci_exec_result *res,
                              const char *before)
{
    const char *line;
    int i;
    if (!res->files || !res->files->nelts)
        return "";
    line = *before && before[strlen(before) - 1] != '\n' ? "\n[files saved: " : "[files saved: ";
    for (i = 0; i < res->files->nelts; i++)
        line = apr_pstrcat(p, line, i ? ", " : "", "/mnt/data/",
                           APR_ARRAY_IDX(res->files, i, const char *), NULL);
    return apr_pstrcat(p, line, "; link to one as sandbox:/mnt/data/<name>]\n", NULL);
}

const char *ci_exec_model_text(apr_pool_t *p, const ci_exec_result *res)
{
    const char *text = res->text && *res->text ? res->text : "";
    int i;
    if (res->images && res->images->nelts && *text && text[strlen(text) - 1] != '\n')
        text = apr_pstrcat(p, text, "\n", NULL);
    for (i = 0; res->images && i < res->images->nelts; i++)
        text = apr_pstrcat(p, text, "[a PNG figure was created and is shown "
                                    "to the user]\n", NULL);
    text = apr_pstrcat(p, text, files_line(p, res, text), NULL);
    if (ci_exec_failed(res))
        return apr_pstrcat(p, text, *text && text[strlen(text) - 1] != '\n' ? "\n" : "",
                           res->failure, res->failure_says_all ? ""
                           : " The interpreter was restarted: variables, imports "
                             "and files from earlier calls are gone.", NULL);
    return *text ? text : "(no output)";
}
