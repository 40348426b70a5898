/*
 * ci_supervisor_files.c - file operations (FILEOP: list, get, delete, put)
 * on a container's sandbox, on the kernel's side: the kernel's answer
 * relayed unparsed and watched for its end line; an answer given here
 * instead; a put's data (FILEDATA, FILEEND) relayed in chunks, held back
 * while the kernel lags, and bounded by the limits as measured from outside
 * the sandbox (ci_usage.h). The request itself is queued behind the
 * container's runs by ci_supervisor_runs.c, which stands on this file:
 * what ends an operation here is reported to it, not called up.
 */
#include <stdio.h>
#include <string.h>
#include "ci_json.h"
#include "ci_log.h"
#include "ci_supervisor_internal.h"
#include "ci_usage.h"

/* Queue one chunk of a put's data for B's kernel (ci_kernel.py's
 * read_chunks): a length line, then the bytes. -1 when it cannot. */
static int queue_chunk(box *b, const char *data, apr_size_t len)
{
    char line[24];
    int n = snprintf(line, sizeof(line), "%" APR_SIZE_T_FMT "\n", len);
    return sup_outq_add(&b->input, line, (apr_size_t)n) < 0 ||
           sup_outq_add(&b->input, data, len) < 0 ? -1 : 0;
}

/* The end of B's put: committed, or abandoned (the kernel removes what it
 * wrote). Always at a chunk's boundary: chunks are queued whole. */
void sup_end_upload(box *b, int commit)
{
    b->upload = 0;
    if (sup_outq_add(&b->input, commit ? "0\n" : "-1\n", commit ? 2 : 3) < 0)
        sup_box_kill(b);
}

/* A file operation's answer of TYPE given here, not by the kernel, as the
 * kernel would have given it (its line, then the end). */
static void send_fileop_answer(box *b, conn *c, const char *type)
{
    char text[64 + FILEOP_END_LEN];
    int n = snprintf(text, sizeof(text), "{\"type\": \"%s\"}" FILEOP_END, type);
    sup_send_frame(c, CI_SUP_OUTPUT, b->id, text, (apr_size_t)n);
}

/* ... and the run over. */
void sup_answer_fileop(box *b, conn *c, const char *type)
{
    send_fileop_answer(b, c, type);
    sup_send_end(c, b->id, CI_EXEC_COMPLETED);
}

static apr_int64_t op_int(json_object *op, const char *key)
{
    json_object *v = ci_json_get(op, key, json_type_int);
    return v && json_object_get_int64(v) > 0 ? json_object_get_int64(v) : 0;
}

/* A put's limits, checked against /mnt/data as measured from outside
 * (ci_usage.h), since the kernel that checks them too shares its process
 * with the user's code: NULL with B's room set, or the refusal to answer
 * ("too_many", "no_space"). */
const char *sup_put_limits(box *b, const char *line, apr_size_t len)
{
    apr_pool_t *p;
    json_object *op;
    const char *err = NULL, *refusal = NULL;
    apr_int64_t max_file, max_files, max_bytes, room = -1;
    ci_data_usage u;
    apr_pool_create(&p, b->pool);
    op = ci_json_parse(p, line, len, &err);
    max_file = op_int(op, "max_file");
    max_files = op_int(op, "max_files");
    max_bytes = op_int(op, "max_bytes");
    if ((max_files || max_bytes) &&
        ci_usage_measure(b->pid, ci_json_str(op, "name"), &u) != 0)
        refusal = "no_space";         /* not measurable: not a limit to lift */
    else if (max_files && !u.has_name && (u.truncated || u.files + 1 > (apr_uint64_t)max_files))
        refusal = "too_many";
    else if (max_bytes && u.truncated)
        refusal = "no_space";
    else {
        if (max_bytes) {
            apr_uint64_t others = u.bytes - u.name_bytes;
            room = others >= (apr_uint64_t)max_bytes ? 0 : max_bytes - (apr_int64_t)others;
        }
        if (max_file && (room < 0 || max_file < room))
            room = max_file;
    }
    b->put_room = room;
    b->put_sent = 0;
    b->put_refusal = NULL;
    apr_pool_destroy(p);
    return refusal;
}

/* A file operation moved bytes (a chunk of a put came, a piece of a get
 * went out): its deadline counts from now, so that a large file at a slow
 * but steady client is not cut, and a stalled one is. */
static void fileop_progress(box *b)
{
    if (b->runner)            /* not once its client is dropped (draining) */
        b->deadline = apr_time_now() + FILEOP_TIMEOUT;
}

/* A put's data from C, or its end: relayed while C's put is the run in
 * progress and its data still open; anything else is a broken client. */
void sup_handle_filedata(conn *c, const ci_sup_frame *f)
{
    box *b = c->attached;
    if (!b || b->runner != c || !b->upload || b->state != BOX_RUNNING ||
        (f->type == CI_SUP_FILEDATA && !f->len) ||
        (f->type == CI_SUP_FILEEND && f->len != 1)) {
        c->closing = 2;               /* sup_detach abandons any put of C's */
        return;
    }
    if (f->type == CI_SUP_FILEEND) {
        if (b->put_refusal)
            b->upload = 0;            /* abandoned already */
        else
            sup_end_upload(b, f->data[0] == 1);
        return;
    }
    fileop_progress(b);
    if (b->put_refusal)
        return;                       /* past its room: read and dropped */
    if (b->put_room >= 0 && b->put_sent + f->len > (apr_uint64_t)b->put_room) {
        /* The kernel removes what it wrote; its answer is replaced. */
        b->put_refusal = "no_space";
        if (sup_outq_add(&b->input, "-1\n", 3) < 0)
            sup_box_kill(b);
        return;
    }
    b->put_sent += f->len;
    if (queue_chunk(b, f->data, f->len) < 0)
        sup_box_kill(b);
}

/* A file operation's output: relayed as it comes (the client's back-pressure
 * bounds what waits here), not parsed; it ends with FILEOP_END. 1 when it
 * ended (B idle, its client told: the queue's next run may start). */
int sup_fileop_output(box *b, const char *buf, apr_size_t n)
{
    conn *to = sup_client_of(b);
    ci_exec_outcome why = b->interrupted;
    fileop_progress(b);
    if (n >= FILEOP_END_LEN) {
        memcpy(b->tail, buf + n - FILEOP_END_LEN, FILEOP_END_LEN);
        b->tail_len = FILEOP_END_LEN;
    }
    else {
        apr_size_t keep = b->tail_len + n > FILEOP_END_LEN ? FILEOP_END_LEN - n
                                                           : b->tail_len;
        memmove(b->tail, b->tail + b->tail_len - keep, keep);
        memcpy(b->tail + keep, buf, n);
        b->tail_len = keep + n;
    }
    if (b->tail_len != FILEOP_END_LEN || memcmp(b->tail, FILEOP_END, FILEOP_END_LEN))
        return 0;
    if (b->put_refusal && to)         /* what the kernel said was not relayed */
        send_fileop_answer(b, to, b->put_refusal);
    b->put_refusal = NULL;
    b->state = BOX_IDLE;
    b->fileop = 0;
    b->interrupted = CI_EXEC_COMPLETED;
    if (to && why != CI_EXEC_COMPLETED)
        sup_send_end_kept(to, b->id, why);
    else if (to)
        sup_send_end(to, b->id, CI_EXEC_COMPLETED);
    b->runner = NULL;
    return 1;
}

/* C is sending a put's data faster than the kernel takes it: C is not read
 * until the kernel catches up (the socket's buffer then holds C back). */
int sup_uploading_ahead(const conn *c)
{
    const box *b = c->attached;
    return b && b->upload && b->runner == c && sup_outq_len(&b->input) >= BACKLOG_MAX;
}
