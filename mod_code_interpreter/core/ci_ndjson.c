/*
 * ci_ndjson.c - the incremental NDJSON reader every provider streams an
 * execution's output into (ci_ndjson.h).
 */
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include "ci_ndjson.h"
#include "ci_cfiles.h"
#include "ci_json.h"

#define LINE_DEPTH 16
#define LINE_KEEP ((apr_size_t)64 * 1024)   /* a line buffer kept across resets */

struct ci_ndjson {
    apr_pool_t *p;
    apr_size_t max_output, hard_cap, total;
    char *line;             /* malloc'd, freed by a pool cleanup: a sandbox's
                               reader lives as long as the sandbox, and a pool
                               (ci_buf) would keep every size it ever grew to */
    apr_size_t line_len, line_alloc;
    apr_size_t line_cap;    /* one line's bytes at most (ci_ndjson_line_cap) */
    int over;               /* hard cap passed */
    int line_over;          /* ... by one line past LINE_CAP */
    char *text;             /* capacity max_output */
    apr_size_t text_len, dropped;
    int cut;                /* the text was cut: nothing more is kept */
    apr_array_header_t *images;
    apr_array_header_t *files;
    apr_array_header_t *commands;   /* ci_command_result; NULL: none read */
    int ended, ready, raised, died;
    int broken;             /* a line of ours was malformed: the stream
                               cannot be trusted (a protocol error) */
};

static apr_status_t free_line(void *data)
{
    ci_ndjson *nd = data;
    free(nd->line);
    nd->line = NULL;
    nd->line_len = nd->line_alloc = 0;
    return APR_SUCCESS;
}

apr_size_t ci_ndjson_line_cap(apr_size_t max_output, apr_size_t hard_cap)
{
    apr_size_t cap = CI_NDJSON_LINE_BASE + CI_NDJSON_LINE_ESCAPE * max_output;
    return cap < hard_cap ? cap : hard_cap;
}

ci_ndjson *ci_ndjson_create(apr_pool_t *p, apr_size_t max_output,
                            apr_size_t hard_cap)
{
    ci_ndjson *nd = apr_pcalloc(p, sizeof(*nd));
    nd->p = p;
    nd->max_output = max_output;
    nd->hard_cap = hard_cap;
    nd->line_cap = ci_ndjson_line_cap(max_output, hard_cap);
    nd->text = apr_palloc(p, max_output + 1);
    nd->images = apr_array_make(p, 2, sizeof(const char *));
    apr_pool_cleanup_register(p, nd, free_line, apr_pool_cleanup_null);
    return nd;
}

void ci_ndjson_reset(ci_ndjson *nd)
{
    nd->total = nd->line_len = nd->text_len = nd->dropped = 0;
    nd->over = nd->ended = nd->ready = nd->raised = nd->died = nd->cut = 0;
    nd->broken = nd->line_over = 0;
    /* a long line's buffer is not kept for the sandbox's next execution */
    if (nd->line_alloc > LINE_KEEP)
        free_line(nd);
    nd->images = apr_array_make(nd->p, 2, sizeof(const char *));
    nd->files = NULL;
    nd->commands = NULL;
}

int ci_ndjson_ended(const ci_ndjson *nd) { return nd->ended; }
int ci_ndjson_ready(const ci_ndjson *nd) { return nd->ready; }

static const char *replace_nul(apr_pool_t *p, const char *s, apr_size_t *n)
{
    char *out = apr_palloc(p, *n * 3 + 1), *w = out;
    apr_size_t i;
    for (i = 0; i < *n; i++) {
        if (s[i])
            *w++ = s[i];
        else {
            memcpy(w, "\xEF\xBF\xBD", 3);
            w += 3;
        }
    }
    *w = '\0';
    *n = (apr_size_t)(w - out);
    return out;
}

/* Sandbox output is untrusted: invalid UTF-8 becomes U+FFFD, and so does
 * NUL, so what reaches the model and the client is always valid JSON text
 * and a whole C string. */
static const char *clean_text(ci_ndjson *nd, const char *s, apr_size_t *n)
{
    s = ci_utf8_sanitize(nd->p, s, *n, n);
    return memchr(s, '\0', *n) ? replace_nul(nd->p, s, n) : s;
}

static void add_text(ci_ndjson *nd, const char *s, apr_size_t n)
{
    apr_size_t before = nd->dropped;
    s = clean_text(nd, s, &n);
    if (nd->cut) {          /* keep the order: nothing after a cut */
        nd->dropped += n;
        return;
    }
    ci_capped_append(nd->text, &nd->text_len, nd->max_output, s, n, &nd->dropped);
    nd->cut = nd->dropped > before;
}

/* Start a new line in the text unless it is empty or already at one. */
static void add_newline_if_needed(ci_ndjson *nd)
{
    if ((nd->text_len > 0 && nd->text[nd->text_len - 1] != '\n') ||
        (nd->text_len == 0 && nd->dropped > 0))
        add_text(nd, "\n", 1);
}

static int is_base64(const char *s)
{
    for (; *s; s++)
        if (!((*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
              (*s >= '0' && *s <= '9') || *s == '+' || *s == '/' || *s == '=' ||
              *s == '\n'))
            return 0;
    return 1;
}

static void take_result(ci_ndjson *nd, json_object *line)
{
    const char *png = ci_json_str(line, "png");
    const char *text = ci_json_str(line, "text");
    if (png && *png && is_base64(png))
        *(const char **)apr_array_push(nd->images) =
            apr_pstrcat(nd->p, "data:image/png;base64,", png, NULL);
    else if (text) {
        add_newline_if_needed(nd);
        add_text(nd, text, strlen(text));
        add_text(nd, "\n", 1);
    }
}

static void take_error(ci_ndjson *nd, json_object *line)
{
    const char *name = ci_json_str(line, "name");
    const char *value = ci_json_str(line, "value");
    const char *tb = ci_json_str(line, "traceback");
    nd->raised = 1;
    if (name && !strcmp(name, "UnexpectedEndOfExecution"))
        nd->died = 1;
    add_newline_if_needed(nd);
    if (tb && *tb) {
        add_text(nd, tb, strlen(tb));
        if (tb[strlen(tb) - 1] != '\n')
            add_text(nd, "\n", 1);
        return;
    }
    add_text(nd, name ? name : "Error", strlen(name ? name : "Error"));
    if (value && *value) {
        add_text(nd, ": ", 2);
        add_text(nd, value, strlen(value));
    }
    add_text(nd, "\n", 1);
}

/* The names of a "files" line (acceptable ones only, at most
 * CI_EXEC_MAX_FILES in all). */
static void take_files(ci_ndjson *nd, json_object *line)
{
    json_object *changed = ci_json_get(line, "changed", json_type_array);
    size_t i, n = changed ? json_object_array_length(changed) : 0;
    if (!nd->files)
        nd->files = apr_array_make(nd->p, (int)(n ? n : 1), sizeof(const char *));
    for (i = 0; i < n && nd->files->nelts < CI_EXEC_MAX_FILES; i++) {
        json_object *f = json_object_array_get_idx(changed, i);
        const char *name = json_object_is_type(f, json_type_string)
                         ? json_object_get_string(f) : NULL;
        if (name && ci_cfile_name_ok(name, (apr_size_t)json_object_get_string_len(f)))
            *(const char **)apr_array_push(nd->files) = apr_pstrdup(nd->p, name);
    }
}

/* A copy of string member KEY of LINE, cleaned; NULL when it is missing. */
static const char *line_text(ci_ndjson *nd, json_object *line, const char *key)
{
    json_object *v = ci_json_get(line, key, json_type_string);
    const char *text;
    apr_size_t n;
    if (!v)
        return NULL;
    n = (apr_size_t)json_object_get_string_len(v);
    text = clean_text(nd, json_object_get_string(v), &n);
    return apr_pstrmemdup(nd->p, text, n);
}

/* A shell call's command, as it ended: {"type": "command", "stdout",
 * "stderr", and "exit_code": N or "timeout": true}. The kernel cut its
 * output already; the hard cap bounds what is kept here, as it bounds the
 * lines. A line without those is a protocol error. */
static void take_command(ci_ndjson *nd, json_object *line)
{
    const char *out = line_text(nd, line, "stdout"), *err = line_text(nd, line, "stderr");
    json_object *code = ci_json_get(line, "exit_code", json_type_int);
    json_object *timeout = ci_json_get(line, "timeout", json_type_boolean);
    ci_command_result *c;
    if (!out || !err || (code && timeout) ||
        (timeout ? !json_object_get_boolean(timeout)
                 : !code || json_object_get_int64(code) < 0 ||
                   json_object_get_int64(code) > 255)) {
        nd->broken = 1;
        return;
    }
    if (!nd->commands)
        nd->commands = apr_array_make(nd->p, 4, sizeof(ci_command_result));
    c = apr_array_push(nd->commands);
    c->stdout_text = out;
    c->stderr_text = err;
    c->timed_out = timeout != NULL;
    c->exit_code = code ? (int)json_object_get_int64(code) : 0;
}

static void take_line(ci_ndjson *nd, const char *s, apr_size_t n)
{
    json_tokener *tok;
    json_object *line;
    const char *type;

    while (n > 0 && (s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    if (n == 0 || nd->ended || !(tok = json_tokener_new_ex(LINE_DEPTH)))
        return;
    line = json_tokener_parse_ex(tok, s, (int)n);
    json_tokener_free(tok);
    type = ci_json_str(line, "type"); /* NULL for anything not an object */
    if (!type)
        ;                             /* not JSON or not ours: skipped */
    else if (!strcmp(type, "stdout") || !strcmp(type, "stderr")) {
        json_object *t = ci_json_get(line, "text", json_type_string);
        if (t)
            add_text(nd, json_object_get_string(t), (apr_size_t)json_object_get_string_len(t));
    }
    else if (!strcmp(type, "result"))
        take_result(nd, line);
    else if (!strcmp(type, "error"))
        take_error(nd, line);
    else if (!strcmp(type, "end_of_execution"))
        nd->ended = 1;
    else if (!strcmp(type, "ready"))
        nd->ready = 1;
    else if (!strcmp(type, "files"))
        take_files(nd, line);
    else if (!strcmp(type, "command"))
        take_command(nd, line);
    else if (!strcmp(type, "dropped")) {
        json_object *b = ci_json_get(line, "bytes", json_type_int);
        if (b && json_object_get_int64(b) > 0)
            nd->dropped += (apr_size_t)json_object_get_int64(b);
    }
    json_object_put(line);
}

/* Room for MORE bytes of the line: -1 past the line's cap (or out of
 * memory). The buffer never grows past the cap. */
static int line_reserve(ci_ndjson *nd, apr_size_t more)
{
    apr_size_t want = nd->line_len + more;
    char *grown;
    if (want > nd->line_cap) {
        nd->line_over = 1;
        return -1;
    }
    if (want <= nd->line_alloc)
        return 0;
    want = want < 4096 ? 4096 : want * 2;
    if (want > nd->line_cap)
        want = nd->line_cap;
    if (!(grown = realloc(nd->line, want)))
        return -1;
    nd->line = grown;
    nd->line_alloc = want;
    return 0;
}

int ci_ndjson_feed(ci_ndjson *nd, const char *data, apr_size_t len)
{
    if (nd->over)
        return -1;
    nd->total += len;
    if (nd->total > nd->hard_cap) {
        nd->over = 1;
        return -1;
    }
    while (len > 0) {
        const char *nl = memchr(data, '\n', len);
        apr_size_t seg = nl ? (apr_size_t)(nl - data) : len;
        if (nd->line_len == 0 && nl) {
            take_line(nd, data, seg);   /* the whole line is here: no copy */
        }
        else {
            if (line_reserve(nd, seg)) {
                nd->over = 1;
                free_line(nd);        /* what it held is not read any more */
                return -1;
            }
            memcpy(nd->line + nd->line_len, data, seg);
            nd->line_len += seg;
            if (nl) {
                take_line(nd, nd->line, nd->line_len);
                nd->line_len = 0;
            }
        }
        if (!nl)
            break;
        data = nl + 1;
        len -= seg + 1;
    }
    return 0;
}

/* How the stream itself says the execution ended, when the provider read
 * it to its end; *FAILURE is set for a failed one. */
static ci_exec_outcome stream_outcome(const ci_ndjson *nd, const char **failure)
{
    if (nd->line_over) {
        *failure = apr_psprintf(nd->p, "The execution wrote a line of more than %"
                                APR_SIZE_T_FMT " bytes to the interpreter's output "
                                "channel and was stopped.", nd->line_cap);
        return CI_EXEC_LOST;
    }
    if (nd->over) {
        *failure = "The execution produced more output than the sandbox "
                   "accepts and was stopped.";
        return CI_EXEC_LOST;
    }
    if (nd->broken) {
        *failure = "The sandbox's answer broke its line protocol (a malformed "
                   "command result).";
        return CI_EXEC_LOST;
    }
    if (nd->died) {
        *failure = "The interpreter died during the execution.";
        return CI_EXEC_LOST;
    }
    if (!nd->ended) {
        *failure = "The sandbox stopped answering: the output stream was cut.";
        return CI_EXEC_LOST;
    }
    return nd->raised ? CI_EXEC_ERROR : CI_EXEC_COMPLETED;
}

void ci_ndjson_result(ci_ndjson *nd, ci_exec_outcome stopped, const char *failure,
                      ci_exec_result *out)
{
    const char *text = apr_pstrmemdup(nd->p, nd->text, nd->text_len);
    if (nd->line_len > 0 && !nd->over && !nd->ended) {
        take_line(nd, nd->line, nd->line_len);   /* a last line without \n */
        nd->line_len = 0;
        text = apr_pstrmemdup(nd->p, nd->text, nd->text_len);
    }
    if (nd->dropped)
        text = apr_psprintf(nd->p, "%s%s[... %" APR_SIZE_T_FMT " more bytes of "
                                   "output were cut ...]\n", text,
                            nd->text_len && text[nd->text_len - 1] != '\n' ? "\n" : "",
                            nd->dropped);
    memset(out, 0, sizeof(*out));
    out->text = text;
    out->text_len = strlen(text);
    out->images = nd->images;
    out->files = nd->files;
    out->commands = nd->commands;
    /* Past the hard cap, or out of protocol, the reader knows best what
     * happened. */
    if (stopped == CI_EXEC_COMPLETED || stopped == CI_EXEC_ERROR || nd->over || nd->broken)
        stopped = stream_outcome(nd, &failure);
    out->outcome = stopped;
    out->failure = ci_exec_failed(out) && failure ? apr_pstrdup(nd->p, failure) : NULL;
}
