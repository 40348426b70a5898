/* ci_shell.c - the hosted shell's calls, items and output entries. */
#include <string.h>
#include <apr_strings.h>
#include "ci_json.h"
#include "ci_shell.h"

static const char bad_arguments[] =
    "The arguments were not a JSON object with \"commands\" (an array of 1 to 100 "
    "strings), \"timeout_ms\" and \"max_output_length\" (positive integers or null); "
    "nothing was run.";

/* Member KEY of ARGS: a positive integer or null/absent (-1). 0 or -1. */
static int read_limit(json_object *args, const char *key, int *out)
{
    json_object *v = NULL;
    int64_t n;
    *out = -1;
    if (!json_object_object_get_ex(args, key, &v) || v == NULL)
        return 0;
    if (!json_object_is_type(v, json_type_int))
        return -1;
    n = json_object_get_int64(v);
    if (n < 1 || n > INT32_MAX)
        return -1;
    *out = (int)n;
    return 0;
}

ci_shell_call *ci_shell_parse(apr_pool_t *p, const char *arguments, const char **why)
{
    const char *perr;
    json_object *args = arguments ? ci_json_parse(p, arguments, strlen(arguments), &perr)
                                  : NULL;
    json_object *commands = ci_json_get(args, "commands", json_type_array);
    ci_shell_call *a = apr_pcalloc(p, sizeof(*a));
    int i, n = commands ? (int)json_object_array_length(commands) : 0;

    *why = bad_arguments;
    if (n < 1 || n > CI_SHELL_MAX_COMMANDS ||
        read_limit(args, "timeout_ms", &a->timeout_ms) ||
        read_limit(args, "max_output_length", &a->max_output_length))
        return NULL;
    a->commands = apr_array_make(p, n, sizeof(const char *));
    for (i = 0; i < n; i++) {
        json_object *c = json_object_array_get_idx(commands, i);
        if (!json_object_is_type(c, json_type_string))
            return NULL;
        *(const char **)apr_array_push(a->commands) =
            apr_pstrmemdup(p, json_object_get_string(c), (apr_size_t)json_object_get_string_len(c));
    }
    *why = NULL;
    return a;
}

static json_object *int_or_null(int v)
{
    return v < 0 ? NULL : json_object_new_int(v);
}

json_object *ci_shell_action_json(const ci_shell_call *a)
{
    json_object *o = json_object_new_object(), *cmds = json_object_new_array();
    int i;
    for (i = 0; a && i < a->commands->nelts; i++)
        json_object_array_add(cmds, json_object_new_string(
                                  APR_ARRAY_IDX(a->commands, i, const char *)));
    json_object_object_add(o, "commands", cmds);
    json_object_object_add(o, "timeout_ms", int_or_null(a ? a->timeout_ms : -1));
    json_object_object_add(o, "max_output_length", int_or_null(a ? a->max_output_length : -1));
    return o;
}

json_object *ci_shell_call_item(const char *item_id, const char *call_id,
                                const ci_shell_call *a, const char *status,
                                const char *container_id)
{
    json_object *item = json_object_new_object(), *env = json_object_new_object();
    json_object_object_add(item, "id", json_object_new_string(item_id));
    json_object_object_add(item, "type", json_object_new_string("shell_call"));
    json_object_object_add(item, "call_id", json_object_new_string(call_id));
    json_object_object_add(item, "action", ci_shell_action_json(a));
    json_object_object_add(item, "status", json_object_new_string(status));
    json_object_object_add(env, "type", json_object_new_string("container_reference"));
    json_object_object_add(env, "container_id", json_object_new_string(container_id));
    json_object_object_add(item, "environment", env);
    return item;
}

json_object *ci_shell_output_item(const char *item_id, const char *call_id,
                                  json_object *output, const char *status,
                                  int max_output_length)
{
    json_object *item = json_object_new_object();
    json_object_object_add(item, "id", json_object_new_string(item_id));
    json_object_object_add(item, "type", json_object_new_string("shell_call_output"));
    json_object_object_add(item, "call_id", json_object_new_string(call_id));
    json_object_object_add(item, "output",
                           output ? json_object_get(output) : json_object_new_array());
    json_object_object_add(item, "status", json_object_new_string(status));
    json_object_object_add(item, "max_output_length", int_or_null(max_output_length));
    return item;
}

json_object *ci_shell_entry(const char *out, const char *err, int timed_out,
                            int exit_code)
{
    json_object *e = json_object_new_object(), *outcome = json_object_new_object();
    json_object_object_add(e, "stdout", json_object_new_string(out ? out : ""));
    json_object_object_add(e, "stderr", json_object_new_string(err ? err : ""));
    json_object_object_add(outcome, "type",
                           json_object_new_string(timed_out ? "timeout" : "exit"));
    if (!timed_out)
        json_object_object_add(outcome, "exit_code", json_object_new_int(exit_code));
    json_object_object_add(e, "outcome", outcome);
    return e;
}

apr_size_t ci_utf8_prefix(const char *s, apr_size_t len, apr_size_t max)
{
    apr_size_t i = 0, chars = 0;
    while (i < len) {
        /* a character begins at every byte that is not a continuation */
        if (((unsigned char)s[i] & 0xC0) != 0x80 && chars++ == max)
            break;
        i++;
    }
    return i;
}

/* One command's entry, cut at MAX characters (0: none). */
static json_object *command_entry(const ci_command_result *c, apr_size_t max)
{
    const char *out = c->stdout_text ? c->stdout_text : "";
    const char *err = c->stderr_text ? c->stderr_text : "";
    apr_size_t olen = strlen(out), elen = strlen(err);
    json_object *e;
    if (max) {
        apr_size_t okeep = ci_utf8_prefix(out, olen, max);
        apr_size_t left = max - ci_utf8_chars(out, okeep);
        elen = ci_utf8_prefix(err, elen, left);
        olen = okeep;
    }
    e = ci_shell_entry("", "", c->timed_out, c->exit_code);
    json_object_object_add(e, "stdout", json_object_new_string_len(out, (int)olen));
    json_object_object_add(e, "stderr", json_object_new_string_len(err, (int)elen));
    return e;
}

json_object *ci_shell_output(const ci_exec_result *res, apr_size_t max_chars)
{
    json_object *out = json_object_new_array();
    int i;
    for (i = 0; res->commands && i < res->commands->nelts; i++)
        json_object_array_add(out, command_entry(&APR_ARRAY_IDX(res->commands, i,
                                                                ci_command_result),
                                                 max_chars));
    if (ci_exec_failed(res))
        json_object_array_add(out, ci_shell_entry("", res->failure ? res->failure
                                                                   : "The commands did not run.",
                                                  res->outcome == CI_EXEC_TIMED_OUT, 1));
    return out;
}

void ci_shell_bounds(const ci_shell_call *a, apr_interval_time_t timeout,
                     apr_size_t max_output, ci_shell_action *out)
{
    out->commands = a->commands;
    out->timeout = timeout;
    if (a->timeout_ms > 0 && apr_time_from_msec(a->timeout_ms) < timeout)
        out->timeout = apr_time_from_msec(a->timeout_ms);
    out->max_output = max_output;
    if (a->max_output_length > 0 && (apr_size_t)a->max_output_length < max_output)
        out->max_output = (apr_size_t)a->max_output_length;
}
