/*
 * e2b_process.c - a hosted shell call in an E2B sandbox, through envd's
 * process service (Connect protocol, JSON codec): one server-streaming
 * POST /process.Process/Start per command, read as it streams in, and
 * POST /process.Process/SendSignal to stop one.
 *
 * envd ends a process's stream only once every writer of its stdout and
 * stderr pipes has closed them, so a background process a command leaves
 * would hold the call open; and it signals a process, never its group. So
 * each command runs under a small bash wrapper (WRAPPER below):
 *
 *   - the command runs with `setsid bash -c COMMAND`: a session, and so a
 *     process group, of its own, stdin from /dev/null;
 *   - once that bash has exited, the wrapper writes a marker holding the
 *     exit status (128+N for a signal) and a nonce of this call on stdout
 *     and on stderr: the command has ended when both markers have been
 *     read, whether or not a background process still holds the pipes
 *     (what comes after a marker is a background process's, and dropped);
 *     the stream is then let go, the process living on;
 *   - SIGTERM to the wrapper (SendSignal) kills the command's group with
 *     SIGKILL: how a command past its timeout, or an interrupted call, is
 *     stopped.
 *
 * Each stream's bytes are kept up to four bytes per character of the
 * call's max_output (enough for that many characters), the rest counted
 * and dropped; every byte counts against CI_HARD_OUTPUT_CAP for the call.
 *
 * No httpd headers: APR, json-c and libcurl only.
 */
#include <stdlib.h>
#include <string.h>
#include <curl/curl.h>
#include <apr_base64.h>
#include <apr_lib.h>
#include <apr_strings.h>
#include "ci_id.h"
#include "ci_buf.h"
#include "ci_json.h"
#include "ci_log.h"
#include "e2b_internal.h"

#define START_PROCEDURE "/process.Process/Start"
#define SIGNAL_PROCEDURE "process.Process/SendSignal"
#define STREAM_TYPE "application/connect+json"
/* Connect envelopes: a flags byte and a 4-byte big-endian length. */
#define ENVELOPE_HEAD 5
#define FLAG_COMPRESSED 0x01
#define FLAG_END_STREAM 0x02
/* envd's data events carry at most 32 KiB (base64 in JSON): far less. */
#define MAX_FRAME ((apr_size_t)1024 * 1024)
#define MAX_ERROR_BODY ((apr_size_t)64 * 1024)
#define NONCE_BYTES 16
#define MARK '\036'
#define MAX_STATUS_DIGITS 3
#define SIGNAL_MS 10000L

#define MSG_TOO_MUCH "The execution produced more output than the sandbox accepts " \
                     "and was stopped."
#define MSG_CUT "The sandbox stopped answering: the output stream was cut."

/* $1: the command, $2: the nonce. A TERM (even one that comes before the
 * command's pid is known) kills the command's group and the command
 * itself (it may not have called setsid yet). */
static const char WRAPPER[] =
    "t= c=\n"
    "trap 't=1; [ -n \"$c\" ] && kill -KILL -- \"-$c\" \"$c\" 2>/dev/null' TERM\n"
    "setsid bash -c \"$1\" </dev/null &\n"
    "c=$!\n"
    "[ -n \"$t\" ] && kill -KILL -- \"-$c\" \"$c\" 2>/dev/null\n"
    "wait \"$c\"; r=$?\n"
    "[ -n \"$t\" ] && { wait \"$c\"; r=$?; }\n"
    "printf '\\036%s:%d\\036' \"$2\" \"$r\"\n"
    "printf '\\036%s:%d\\036' \"$2\" \"$r\" >&2\n";

/* ---- one output stream ---------------------------------------------------- */

/* A command's stdout or stderr: the bytes kept, the marker being matched. */
typedef struct output {
    ci_buf kept;
    apr_size_t cap;           /* bytes kept at most */
    apr_size_t dropped;
    const char *prefix;       /* MARK nonce ':' */
    apr_size_t prefix_len;
    apr_size_t matched;       /* bytes of PREFIX read so far */
    char digits[MAX_STATUS_DIGITS + 1];
    apr_size_t ndigits;
    int in_status;            /* PREFIX read: the status digits follow */
    int ended;                /* the marker was read */
    int status;
} output;

static void output_init(output *o, apr_pool_t *p, const char *prefix, apr_size_t cap)
{
    memset(o, 0, sizeof(*o));
    ci_buf_init(&o->kept, p, cap);
    o->cap = cap;
    o->prefix = prefix;
    o->prefix_len = strlen(prefix);
}

static void keep(output *o, const char *data, apr_size_t len)
{
    apr_size_t room = o->cap - o->kept.len, take = len < room ? len : room;
    if (take)
        ci_buf_append(&o->kept, data, take);
    o->dropped += len - take;
}

/* Bytes that looked like the start of a marker and are not one. */
static void unmatch(output *o)
{
    keep(o, o->prefix, o->matched);
    keep(o, o->digits, o->ndigits);
    o->matched = o->ndigits = 0;
    o->in_status = 0;
}

/* One byte of a marker's status, or of what turns out to be no marker:
 * 1 when it was taken, 0 when it is to be read again as output. */
static int status_byte(output *o, char c)
{
    if (apr_isdigit(c) && o->ndigits < MAX_STATUS_DIGITS) {
        o->digits[o->ndigits++] = c;
        return 1;
    }
    if (c == MARK && o->ndigits) {
        o->digits[o->ndigits] = '\0';
        o->status = atoi(o->digits);
        o->ended = 1;
        return 1;
    }
    unmatch(o);
    return 0;
}

/* Feed LEN bytes of the stream: kept up to the cap, until the marker. The
 * prefix's first byte (MARK) occurs nowhere else in it, so a mismatch only
 * ever restarts the match at the byte that broke it. */
static void output_feed(output *o, const char *data, apr_size_t len)
{
    apr_size_t i = 0;
    while (i < len && !o->ended) {
        const char *mark;
        if (o->in_status) {
            i += status_byte(o, data[i]);
            continue;
        }
        if (o->matched) {
            if (data[i] == o->prefix[o->matched]) {
                i++;
                if (++o->matched == o->prefix_len) {
                    o->matched = 0;
                    o->in_status = 1;
                }
                continue;
            }
            unmatch(o);
        }
        mark = memchr(data + i, MARK, len - i);
        keep(o, data + i, mark ? (apr_size_t)(mark - data) - i : len - i);
        if (!mark)
            return;
        i = (apr_size_t)(mark - data) + 1;
        o->matched = 1;
    }
}

/* The first *ROOM characters of what O kept (invalid UTF-8 as U+FFFD);
 * *ROOM less what was taken. Memory from P. */
static const char *output_text(apr_pool_t *p, const output *o, apr_size_t *room)
{
    apr_size_t n, at = 0, chars = 0;
    const char *s = ci_utf8_sanitize(p, ci_buf_str(&o->kept), o->kept.len, &n);
    while (at < n && chars < *room) {
        unsigned char c = (unsigned char)s[at];
        at += c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        chars++;
    }
    *room -= chars;
    return apr_pstrmemdup(p, s, at);
}

/* ---- the stream of one command -------------------------------------------- */

typedef struct shell_stream {
    ci_sandbox *sb;
    apr_pool_t *p;
    long status;              /* HTTP status once known */
    ci_buf error_body;        /* a non-200 answer's */
    unsigned char head[ENVELOPE_HEAD];
    apr_size_t head_len;
    ci_buf frame;             /* the envelope being read */
    apr_size_t frame_len;
    int frame_flags;
    ci_buf decoded;           /* a data event's bytes */
    apr_uint32_t pid;         /* from the start event (0: none yet) */
    int end_seen;             /* envd's end event */
    int end_code;             /* its exit code, 128+N for a signal */
    int stream_ended;         /* the end-of-stream envelope */
    const char *stream_error; /* its error's code */
    const char *bad;          /* what was wrong with the stream */
    output out, err;
    apr_size_t *total;        /* the call's bytes of output */
    int too_much;
} shell_stream;

/* The command has ended: both markers read, or envd's end event. */
static int command_ended(const shell_stream *st)
{
    return (st->out.ended && st->err.ended) || st->end_seen;
}

/* Go's names of the signals (os.ProcessState.String: "signal: killed"). */
static int signal_number(const char *status)
{
    static const char *const names[] = {
        NULL, "hangup", "interrupt", "quit", "illegal instruction",
        "trace/breakpoint trap", "aborted", "bus error", "floating point exception",
        "killed", "user defined signal 1", "segmentation fault",
        "user defined signal 2", "broken pipe", "alarm clock", "terminated"
    };
    size_t i;
    if (!status || strncmp(status, "signal: ", 8))
        return 0;
    for (i = 1; i < sizeof(names) / sizeof(names[0]); i++)
        if (!strncmp(status + 8, names[i], strlen(names[i])))
            return (int)i;
    return 0;
}

/* {"exitCode": N, "exited": true, "status": "exit status N"} or, for a
 * signal, {"exitCode": -1, "status": "signal: killed"} (zero values left
 * out, as protojson writes them). */
static void take_end(shell_stream *st, json_object *end)
{
    json_object *code = ci_json_get(end, "exitCode", json_type_int);
    json_object *exited = ci_json_get(end, "exited", json_type_boolean);
    int sig = signal_number(ci_json_str(end, "status"));
    st->end_seen = 1;
    if (exited && json_object_get_boolean(exited))
        st->end_code = code ? json_object_get_int(code) : 0;
    else
        st->end_code = 128 + (sig ? sig : 9);
}

static int take_data(shell_stream *st, json_object *data)
{
    const char *text = ci_json_str(data, "stdout");
    output *o = &st->out;
    int n;
    if (!text) {
        text = ci_json_str(data, "stderr");
        o = &st->err;
    }
    if (!text || !*text)
        return 0;                 /* pty output, or nothing */
    ci_buf_clear(&st->decoded);
    ci_buf_reserve(&st->decoded, (apr_size_t)apr_base64_decode_len(text));
    n = apr_base64_decode_binary((unsigned char *)st->decoded.data, text);
    *st->total += (apr_size_t)(n > 0 ? n : 0);
    if (*st->total > CI_HARD_OUTPUT_CAP) {
        st->too_much = 1;
        return -1;
    }
    output_feed(o, st->decoded.data, (apr_size_t)(n > 0 ? n : 0));
    return 0;
}

/* One envelope's JSON: an event, or the end of the stream. -1: stop. */
static int take_frame(shell_stream *st)
{
    const char *perr;
    json_object *root = ci_json_parse(st->p, st->frame.data ? st->frame.data : "",
                                      st->frame.len, &perr), *event, *v;
    if (!root || !json_object_is_type(root, json_type_object)) {
        st->bad = "envd sent an unreadable event";
        return -1;
    }
    if (st->frame_flags & FLAG_END_STREAM) {
        v = ci_json_get(root, "error", json_type_object);
        st->stream_ended = 1;
        st->stream_error = v ? (e2b_connect_code(v) ? e2b_connect_code(v) : "unknown")
                             : NULL;
        return 0;
    }
    if (!(event = ci_json_get(root, "event", json_type_object)))
        return 0;
    if ((v = ci_json_get(event, "start", json_type_object)) &&
        (v = ci_json_get(v, "pid", json_type_int)))
        st->pid = (apr_uint32_t)json_object_get_int64(v);
    else if ((v = ci_json_get(event, "data", json_type_object)))
        return take_data(st, v);
    else if ((v = ci_json_get(event, "end", json_type_object)))
        take_end(st, v);
    return 0;
}

/* Envelopes out of the bytes of the answer. -1: stop reading. */
static int take_bytes(shell_stream *st, const char *data, apr_size_t len)
{
    while (len) {
        apr_size_t n;
        if (st->head_len < ENVELOPE_HEAD) {
            n = ENVELOPE_HEAD - st->head_len < len ? ENVELOPE_HEAD - st->head_len : len;
            memcpy(st->head + st->head_len, data, n);
            st->head_len += n;
            data += n;
            len -= n;
            if (st->head_len < ENVELOPE_HEAD)
                return 0;
            st->frame_flags = st->head[0];
            st->frame_len = ((apr_size_t)st->head[1] << 24) | ((apr_size_t)st->head[2] << 16) |
                            ((apr_size_t)st->head[3] << 8) | st->head[4];
            ci_buf_clear(&st->frame);
            if (st->frame_len > MAX_FRAME || (st->frame_flags & FLAG_COMPRESSED)) {
                st->bad = "envd sent an envelope this client cannot read";
                return -1;
            }
        }
        n = st->frame_len - st->frame.len < len ? st->frame_len - st->frame.len : len;
        ci_buf_append(&st->frame, data, n);
        data += n;
        len -= n;
        if (st->frame.len == st->frame_len) {
            st->head_len = 0;
            /* both markers: the command ended, whoever holds the pipes */
            if (take_frame(st) < 0 || (st->out.ended && st->err.ended && !st->end_seen))
                return -1;
        }
    }
    return 0;
}

static size_t on_stream(char *ptr, size_t size, size_t nmemb, void *userdata)
{
    shell_stream *st = userdata;
    size_t n = size * nmemb;
    if (!st->status)
        curl_easy_getinfo(st->sb->curl, CURLINFO_RESPONSE_CODE, &st->status);
    if (st->status != 200)
        return ci_buf_append(&st->error_body, ptr, n) ? 0 : n;
    return take_bytes(st, ptr, n) < 0 ? 0 : n;
}

/* ---- one command ----------------------------------------------------------- */

/* What the call knows across its commands. */
typedef struct shell_call {
    ci_sandbox *sb;
    apr_pool_t *p;            /* the result's */
    const ci_shell_action *action;
    const char *nonce;
    const char *prefix;       /* MARK nonce ':' */
    apr_time_t deadline;      /* the tool's timeout, for the whole call */
    apr_size_t total;
    apr_array_header_t *commands;  /* the result's ci_command_result */
    ci_exec_outcome outcome;
    const char *failure;
} shell_call;

/* The Start request in its envelope: bash runs WRAPPER with COMMAND and the
 * nonce, in /mnt/data. *LEN: its length. */
static const char *start_request(shell_call *call, apr_pool_t *p, const char *command,
                                 apr_size_t *len)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    json_object *proc = json_object_new_object(), *args = json_object_new_array();
    const char *body;
    apr_size_t n;
    char *env;

    json_object_array_add(args, json_object_new_string("-c"));
    json_object_array_add(args, json_object_new_string(WRAPPER));
    json_object_array_add(args, json_object_new_string("ci-shell"));
    json_object_array_add(args, json_object_new_string(command));
    json_object_array_add(args, json_object_new_string(call->nonce));
    json_object_object_add(proc, "cmd", json_object_new_string("/bin/bash"));
    json_object_object_add(proc, "args", args);
    json_object_object_add(proc, "cwd", json_object_new_string(E2B_DATA_DIR));
    json_object_object_add(req, "process", proc);
    body = ci_json_pstr(p, req, &n);
    env = apr_palloc(p, n + ENVELOPE_HEAD);
    env[0] = 0;
    env[1] = (char)((n >> 24) & 0xff);
    env[2] = (char)((n >> 16) & 0xff);
    env[3] = (char)((n >> 8) & 0xff);
    env[4] = (char)(n & 0xff);
    memcpy(env + ENVELOPE_HEAD, body, n);
    *len = n + ENVELOPE_HEAD;
    return env;
}

/* SendSignal SIGTERM to the wrapper of ST's command: its trap kills the
 * command's group. Not stopped by an interrupt (it follows one). */
static void stop_command(shell_call *call, apr_pool_t *p, const shell_stream *st)
{
    json_object *req = ci_json_own(p, json_object_new_object()), *sel, *out;
    const char *err = NULL;
    envd_rc rc;

    if (!st->pid) {
        /* a refusal or an ended stream started nothing */
        if ((!st->status || st->status == 200) && !st->stream_ended)
            ci_log(CI_LOG_WARNING, "CI0316: a shell command in an E2B sandbox was "
                   "stopped before envd said its pid: it may still run");
        return;
    }
    sel = json_object_new_object();
    json_object_object_add(sel, "pid", json_object_new_int64(st->pid));
    json_object_object_add(req, "process", sel);
    json_object_object_add(req, "signal", json_object_new_string("SIGNAL_SIGTERM"));
    rc = e2b_envd_rpc(call->sb, p, SIGNAL_PROCEDURE, req, &out, &err);
    /* not found: it had ended (and was reaped) meanwhile */
    if (rc != ENVD_OK && rc != ENVD_MISSING)
        ci_log(CI_LOG_WARNING, "CI0317: a shell command in an E2B sandbox could not be "
               "stopped (%s)", err ? err : "no answer");
}

/* How the stream of a command that did not end failed (*MSG for the
 * model), once its transfer returned RC. */
static ci_exec_outcome stream_failure(shell_call *call, apr_pool_t *p,
                                      const shell_stream *st, CURLcode rc, const char **msg)
{
    if (st->status && st->status != 200) {
        *msg = st->status == 502
                   ? "The sandbox did not answer (HTTP 502): it has timed out or was stopped."
                   : apr_psprintf(p, "The sandbox refused the command (HTTP %ld).",
                                  st->status);
        return CI_EXEC_LOST;
    }
    if (st->stream_error) {
        *msg = apr_psprintf(p, "The sandbox could not run the command (envd: %s).",
                            st->stream_error);
        return CI_EXEC_LOST;
    }
    if (st->bad) {
        *msg = apr_psprintf(p, "The sandbox could not run the command (%s).", st->bad);
        return CI_EXEC_LOST;
    }
    if (rc != CURLE_OK && !st->status) {
        *msg = apr_psprintf(p, "The sandbox could not be reached (%s).",
                            curl_easy_strerror(rc));
        ci_log(CI_LOG_WARNING, "CI0318: envd of the E2B sandbox at %s could not be "
               "reached (%s)", call->sb->data_base, curl_easy_strerror(rc));
        return CI_EXEC_LOST;
    }
    *msg = MSG_CUT;
    return CI_EXEC_LOST;
}

/* The command's result from ST (the marker's status, else envd's). */
static void command_result(shell_call *call, const shell_stream *st, int timed_out)
{
    ci_command_result *r = apr_array_push(call->commands);
    apr_size_t room = call->action->max_output;
    r->stdout_text = output_text(call->p, &st->out, &room);
    r->stderr_text = output_text(call->p, &st->err, &room);
    r->timed_out = timed_out;
    r->exit_code = timed_out ? 0 : st->out.ended ? st->out.status : st->end_code;
}

/* Bytes of each stream kept: four per character (UTF-8's longest). */
static apr_size_t keep_cap(apr_size_t max_output)
{
    return max_output > CI_HARD_OUTPUT_CAP / 4 ? CI_HARD_OUTPUT_CAP : max_output * 4;
}

static void stream_init(shell_stream *st, shell_call *call, apr_pool_t *p)
{
    apr_size_t cap = keep_cap(call->action->max_output);
    memset(st, 0, sizeof(*st));
    st->sb = call->sb;
    st->p = p;
    ci_buf_init(&st->error_body, p, MAX_ERROR_BODY);
    ci_buf_init(&st->frame, p, MAX_FRAME);
    ci_buf_init(&st->decoded, p, MAX_FRAME);
    output_init(&st->out, p, call->prefix, cap);
    output_init(&st->err, p, call->prefix, cap);
    st->total = &call->total;
}

/* The call ends at its own deadline (the tool's timeout). */
static int call_timed_out(shell_call *call)
{
    call->outcome = CI_EXEC_TIMED_OUT;
    call->failure = apr_psprintf(call->p, "The shell call timed out after %d s and was "
                                 "stopped.", (int)apr_time_sec(call->sb->def->timeout));
    return 0;
}

/* How a command that did not end ended the call (its stream returned RC;
 * OWN: its own deadline, UNTIL: the one the transfer had). 0. */
static int command_stopped(shell_call *call, apr_pool_t *p, const shell_stream *st,
                           CURLcode rc, apr_time_t own, apr_time_t until)
{
    stop_command(call, p, st);
    if (st->too_much) {
        call->outcome = CI_EXEC_LOST;
        call->failure = MSG_TOO_MUCH;
        return 0;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK || e2b_interrupted(call->sb)) {
        call->outcome = CI_EXEC_INTERRUPTED;
        call->failure = MSG_STOPPED;
        return 0;
    }
    if (rc == CURLE_OPERATION_TIMEDOUT && (st->status == 200 || apr_time_now() >= until)) {
        command_result(call, st, 1);
        return own <= call->deadline ? 0 : call_timed_out(call);
    }
    call->outcome = stream_failure(call, call->p, st, rc, &call->failure);
    return 0;
}

/* Run COMMAND: 1 when the next one may run, 0 when the call ends here. */
static int run_command(shell_call *call, apr_pool_t *p, const char *command)
{
    apr_time_t now = apr_time_now(), own = now + call->action->timeout;
    apr_time_t until = own < call->deadline ? own : call->deadline;
    envd_call c = { .rpc_type = STREAM_TYPE, .on_data = on_stream, .abortable = 1 };
    shell_stream st;
    CURLcode rc;
    long status;

    if (until <= now)
        return call_timed_out(call);
    stream_init(&st, call, p);
    c.url = apr_pstrcat(p, e2b_envd_base(call->sb, p), START_PROCEDURE, NULL);
    c.rpc_body = start_request(call, p, command, &c.rpc_len);
    c.baton = &st;
    c.total_ms = (long)apr_time_as_msec(until - now);
    if (c.total_ms < 1)
        c.total_ms = 1;
    rc = e2b_envd_perform(call->sb, &c, &status);
    if (!st.status)
        st.status = status;
    if (command_ended(&st)) {
        command_result(call, &st, 0);
        return 1;
    }
    return command_stopped(call, p, &st, rc, own, until);
}

/* A request's own sandbox has no /mnt/data until something makes it. NULL,
 * or why not (for the model). */
static const char *data_dir(ci_sandbox *sb, apr_pool_t *p)
{
    if (sb->data_dir)
        return NULL;
    if (e2b_files_prepare(sb, p))
        return "The sandbox could not make " E2B_DATA_DIR ".";
    sb->data_dir = 1;
    return NULL;
}

apr_status_t e2b_run_commands(ci_sandbox *sb, apr_pool_t *p, const ci_shell_action *action,
                              ci_exec_result *res)
{
    apr_time_t began = apr_time_now();
    char nonce[2 * NONCE_BYTES + 1];
    apr_hash_t *files = NULL;
    shell_call call;
    apr_pool_t *tmp;
    int i, n = action->commands->nelts;

    memset(&call, 0, sizeof(call));
    memset(res, 0, sizeof(*res));
    call.sb = sb;
    call.p = p;
    call.action = action;
    call.deadline = began + sb->def->timeout;
    call.commands = apr_array_make(p, n > 0 ? n : 1, sizeof(ci_command_result));
    ci_random_hex(nonce, NONCE_BYTES);
    call.nonce = apr_pstrdup(p, nonce);
    call.prefix = apr_pstrcat(p, "\036", nonce, ":", NULL);
    apr_pool_create(&tmp, p);
    call.outcome = e2b_before_run(sb, tmp, &call.failure);
    if (call.outcome == CI_EXEC_COMPLETED && (call.failure = data_dir(sb, tmp)) != NULL)
        call.outcome = CI_EXEC_LOST;
    if (call.outcome == CI_EXEC_COMPLETED) {
        if (sb->container)
            files = e2b_files_snapshot(sb, tmp);
        for (i = 0; i < n; i++) {
            apr_pool_t *one;
            int next;
            apr_pool_create(&one, tmp);
            next = run_command(&call, one, APR_ARRAY_IDX(action->commands, i, const char *));
            apr_pool_destroy(one);
            if (!next)
                break;
        }
    }
    res->outcome = call.outcome;
    res->failure = call.outcome == CI_EXEC_COMPLETED ? NULL : apr_pstrdup(p, call.failure);
    res->text = "";
    res->commands = call.commands;
    if (files)
        e2b_files_changed(sb, p, files, res);
    res->duration = apr_time_now() - began;
    apr_pool_destroy(tmp);
    return APR_SUCCESS;
}
