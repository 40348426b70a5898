/*
 * files_local.c - the local provider's container files (ci_sandbox.h):
 * each operation is a FILEOP the supervisor relays to the kernel inside the
 * container's sandbox (ci_kernel.py's file_op), in its turn with the
 * container's runs. The kernel sees the sandbox's tree as the code does and
 * follows no symlink; no path of the sandbox is ever resolved on the host.
 */
#include <string.h>
#include <apr_base64.h>
#include <apr_strings.h>
#include "ci_sandbox.h"
#include "ci_supervisor_client.h"
#include "ci_cfiles.h"
#include "ci_json.h"
#include "files_local.h"

#define DATA_LINE_MAX 65536          /* decoded bytes of one data line (48 KiB sent) */

/* {"container": ID, "op": {"op": KIND, "name": NAME?}}; OP is returned to
 * add more to. */
static json_object *request(apr_pool_t *p, const ci_file_target *t, const char *kind,
                            const char *name, json_object **op)
{
    json_object *o = ci_json_own(p, json_object_new_object());
    *op = json_object_new_object();
    json_object_object_add(*op, "op", json_object_new_string(kind));
    if (name)
        json_object_object_add(*op, "name", json_object_new_string(name));
    json_object_object_add(o, "container", json_object_new_string(t->container));
    json_object_object_add(o, "op", *op);
    return o;
}

typedef struct answer {
    apr_pool_t *p;
    const ci_file_target *t;
    apr_array_header_t *files;   /* list */
    const char *type;            /* the last answer line's type */
    json_object *line;           /* ... and the line */
    const ci_file_sink *sink;    /* get */
    apr_int64_t bytes, got;
    int started, failed;
    char *chunk;
    ci_fileop_upload *up;        /* put */
    apr_int64_t max_file;        /* put: max_file= (0: none) */
} answer;

/* Run the operation O, each answer line to FN (with A): a status. */
static ci_file_status exchange(answer *a, json_object *o, ci_fileop_line_fn fn,
                               ci_fileop_upload *up, const char **err)
{
    apr_size_t len;
    const char *req = ci_json_pstr(a->p, o, &len);
    int got = ci_supervisor_fileop(a->p, req, len, fn, a, up, err);
    if (got == 0)
        return CI_FILE_NO_SANDBOX;
    return got < 0 ? CI_FILE_FAILED : CI_FILE_OK;
}

/* The answer's last line other than end_of_execution, kept. */
static int on_line(void *baton, const char *line, apr_size_t len)
{
    answer *a = baton;
    const char *err = NULL;
    json_object *o = ci_json_parse(a->p, line, len, &err);
    const char *type = ci_json_str(o, "type");
    if (type && strcmp(type, "end_of_execution")) {
        a->type = type;
        a->line = o;
    }
    return 0;
}

static int on_list_line(void *baton, const char *line, apr_size_t len)
{
    answer *a = baton;
    apr_array_header_t *f = ci_cfiles_parse(a->p, a->t->container, line, len);
    if (f)
        a->files = f;
    return 0;
}

ci_file_status ci_local_files_list(apr_pool_t *p, const ci_file_target *t,
                                       apr_array_header_t **files, const char **err)
{
    answer a = { .p = p, .t = t };
    json_object *op, *o = request(p, t, "list", NULL, &op);
    ci_file_status st = exchange(&a, o, on_list_line, NULL, err);
    if (st == CI_FILE_OK && !a.files) {
        *err = "no listing in the kernel's answer";
        st = CI_FILE_FAILED;
    }
    *files = a.files ? a.files : apr_array_make(p, 1, sizeof(ci_cfile));
    return st;
}

/* The content, as the kernel streams it: {"type":"file","bytes":N}, then
 * {"type":"data","b64":...} lines, each decoded and handed on at once. */
static int on_content_line(void *baton, const char *line, apr_size_t len)
{
    answer *a = baton;
    const char *err = NULL, *type, *b64;
    json_object *o;
    apr_pool_t *p;
    int n;
    apr_pool_create(&p, a->p);
    o = ci_json_parse(p, line, len, &err);
    type = ci_json_str(o, "type");
    if (!type || !strcmp(type, "end_of_execution"))
        ;
    else if (!a->started && !strcmp(type, "file")) {
        a->bytes = json_object_get_int64(ci_json_get(o, "bytes", json_type_int));
        a->started = 1;
        a->failed = a->sink->size(a->sink->baton, a->bytes) != 0;
    }
    else if (a->started && !strcmp(type, "data") && (b64 = ci_json_str(o, "b64")) &&
             (apr_size_t)apr_base64_decode_len(b64) <= DATA_LINE_MAX) {
        n = apr_base64_decode(a->chunk, b64);
        if (n < 0 || a->got + n > a->bytes)
            a->failed = 2;
        else if (a->sink->data(a->sink->baton, a->chunk, (apr_size_t)n))
            a->failed = 1;
        else
            a->got += n;
    }
    else if (a->started)
        a->failed = 2;
    else
        a->type = apr_pstrdup(a->p, type);
    apr_pool_destroy(p);
    return a->failed ? -1 : 0;
}

ci_file_status ci_local_file_get(apr_pool_t *p, const ci_file_target *t,
                                     const char *name, apr_int64_t max,
                                     const ci_file_sink *sink, const char **err)
{
    answer a = { .p = p, .t = t, .sink = sink };
    json_object *op, *o = request(p, t, "get", name, &op);
    ci_file_status st;
    a.chunk = apr_palloc(p, DATA_LINE_MAX + 4);
    json_object_object_add(op, "max", json_object_new_int64(max));
    st = exchange(&a, o, on_content_line, NULL, err);
    if (a.failed == 1)
        return CI_FILE_SINK_FAILED;
    if (!a.started)
        return st == CI_FILE_NO_SANDBOX ? CI_FILE_NOT_FOUND
             : a.type && !strcmp(a.type, "too_large") ? CI_FILE_TOO_LARGE
             : st == CI_FILE_FAILED ? st : CI_FILE_NOT_FOUND;
    if (st == CI_FILE_OK && (a.failed || a.got != a.bytes)) {
        *err = "the file changed or could not be read";
        st = CI_FILE_FAILED;
    }
    return st;
}

ci_file_status ci_local_file_delete(apr_pool_t *p, const ci_file_target *t,
                                        const char *name, const char **err)
{
    answer a = { .p = p, .t = t };
    json_object *op, *o = request(p, t, "delete", name, &op);
    ci_file_status st = exchange(&a, o, on_line, NULL, err);
    if (st == CI_FILE_NO_SANDBOX || (st == CI_FILE_OK && (!a.type || strcmp(a.type, "deleted"))))
        return CI_FILE_NOT_FOUND;
    return st;
}

/* A put's answer lines: "ready" (with the room the kernel gives) asks for
 * the data; the last other line is the outcome. */
static int on_put_line(void *baton, const char *line, apr_size_t len)
{
    answer *a = baton;
    on_line(baton, line, len);
    if (a->type && !strcmp(a->type, "ready") && !a->started) {
        a->started = 1;
        a->bytes = json_object_get_int64(ci_json_get(a->line, "room", json_type_int));
        /* the kernel's room, never more than max_file: counted here, outside
         * the sandbox (the supervisor bounds max_bytes the same way) */
        a->up->max = a->max_file && (a->bytes < 0 || a->bytes > a->max_file)
                   ? a->max_file : a->bytes;
        return 1;
    }
    return 0;
}

static void add_limit(json_object *op, const char *key, apr_uint64_t value)
{
    if (value)
        json_object_object_add(op, key, json_object_new_int64((int64_t)value));
}

/* What the kernel's last line says of the put. */
static ci_file_status put_outcome(const answer *a, const char **err)
{
    static const struct { const char *type; ci_file_status st; } outcomes[] = {
        { "stored", CI_FILE_OK }, { "too_many", CI_FILE_TOO_MANY },
        { "too_large", CI_FILE_TOO_LARGE }, { "no_space", CI_FILE_NO_ROOM },
    };
    apr_size_t i;
    for (i = 0; a->type && i < sizeof(outcomes) / sizeof(outcomes[0]); i++)
        if (!strcmp(a->type, outcomes[i].type))
            return outcomes[i].st;
    *err = a->type && !strcmp(a->type, "error")
         ? apr_psprintf(a->p, "the file could not be written: %s",
                        ci_json_str(a->line, "value") ? ci_json_str(a->line, "value") : "")
         : "the file could not be written";
    return CI_FILE_FAILED;
}

ci_file_status ci_local_file_put(apr_pool_t *p, const ci_file_target *t,
                                     const char *name, const ci_file_limits *limits,
                                     const ci_file_source *src, const char **err)
{
    ci_fileop_upload up;
    answer a = { .p = p, .t = t, .up = &up, .max_file = (apr_int64_t)limits->max_file };
    json_object *op, *o = request(p, t, "put", name, &op);
    ci_file_status st;
    memset(&up, 0, sizeof(up));
    up.max = -1;
    up.read = src->read;
    up.baton = src->baton;
    add_limit(op, "max_file", limits->max_file);
    add_limit(op, "max_files", limits->max_files);
    add_limit(op, "max_bytes", limits->max_bytes);
    /* The kernel tells the room left (max_file, or what max_bytes leaves)
     * in its "ready" line; the sender stops there or at max_file, whichever
     * comes first, and the supervisor holds max_files and max_bytes against
     * its own count: the kernel's checks are the first, not the last. */
    st = exchange(&a, o, on_put_line, &up, err);
    if (st != CI_FILE_OK)
        return st;
    if (up.outcome == CI_UPLOAD_SOURCE_FAILED)
        return CI_FILE_SOURCE_FAILED;
    /* Past the room: max_file's fault when it is what set the room. */
    if (up.outcome == CI_UPLOAD_TOO_LARGE)
        return limits->max_file && up.max == (apr_int64_t)limits->max_file
             ? CI_FILE_TOO_LARGE : CI_FILE_NO_ROOM;
    if (a.type && !strcmp(a.type, "too_large"))
        return limits->max_file && a.bytes == (apr_int64_t)limits->max_file
             ? CI_FILE_TOO_LARGE : CI_FILE_NO_ROOM;
    return put_outcome(&a, err);
}

