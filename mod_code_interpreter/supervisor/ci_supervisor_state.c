/*
 * ci_supervisor_state.c - the bottom of the local sandbox supervisor: its
 * state (one, as there is one thread) and the wire to its clients: an output
 * queue, and the frames sent to a connection through it. Every other file of
 * the supervisor stands on this one, and this one on none of them.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "ci_supervisor_internal.h"

sup_daemon sup_state;

/* ---- an output queue ---------------------------------------------------- */

int sup_outq_add(outq *q, const void *data, apr_size_t len)
{
    if (q->start && q->start == q->used)
        q->start = q->used = 0;
    if (q->used + len > q->cap) {
        apr_size_t want = (q->used - q->start + len) * 2 + 4096;
        char *nb;
        if (q->start) {
            memmove(q->buf, q->buf + q->start, q->used - q->start);
            q->used -= q->start;
            q->start = 0;
        }
        if (q->used + len > q->cap) {
            if (!(nb = realloc(q->buf, want)))
                return -1;
            q->buf = nb;
            q->cap = want;
        }
    }
    memcpy(q->buf + q->used, data, len);
    q->used += len;
    return 0;
}

apr_size_t sup_outq_len(const outq *q)
{
    return q->used - q->start;
}

int sup_outq_flush(outq *q, int fd, int is_socket)
{
    while (sup_outq_len(q)) {
        ssize_t n = is_socket
            ? send(fd, q->buf + q->start, sup_outq_len(q), MSG_NOSIGNAL | MSG_DONTWAIT)
            : write(fd, q->buf + q->start, sup_outq_len(q));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (n <= 0)
            return -1;
        q->start += (apr_size_t)n;
    }
    return 0;
}

void sup_outq_free(outq *q)
{
    free(q->buf);
    memset(q, 0, sizeof(*q));
}

/* ---- frames to a connection -------------------------------------------- */

void sup_send_frame(conn *c, int type, apr_uint32_t id, const char *data,
                    apr_size_t len)
{
    unsigned char hdr[CI_SUP_HEADER];
    ci_sup_header(hdr, type, id, len);
    if (sup_outq_add(&c->out, hdr, sizeof(hdr)) < 0 ||
        (len && sup_outq_add(&c->out, data, len) < 0))
        c->closing = 1;
    /* Sent now when the socket takes it: a waiting child should not wait
     * for the next turn of the loop (or for a sandbox being forked). */
    else if (sup_outq_flush(&c->out, c->fd, 1) < 0)
        c->closing = 2;
}

void sup_send_text(conn *c, int type, apr_uint32_t id, const char *text)
{
    sup_send_frame(c, type, id, text, text ? strlen(text) : 0);
}

void sup_send_end(conn *c, apr_uint32_t id, ci_exec_outcome outcome)
{
    char o = (char)outcome;
    sup_send_frame(c, CI_SUP_END, id, &o, 1);
}

/* The run ended with OUTCOME after an interrupt its interpreter survived. */
void sup_send_end_kept(conn *c, apr_uint32_t id, ci_exec_outcome outcome)
{
    char o[2] = { (char)outcome, CI_SUP_END_KEPT };
    sup_send_frame(c, CI_SUP_END, id, o, 2);
}
