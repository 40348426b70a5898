/*
 * ci_supervisor_client.h - talking to the local sandbox supervisor
 * (ci_supervisor.h) from httpd's children and parent: the local provider's
 * sandboxes, the container directory it hosts, its status and the file
 * operations of its containers. httpd-free.
 */
#ifndef CI_SUPERVISOR_CLIENT_H
#define CI_SUPERVISOR_CLIENT_H

#include <apr_pools.h>
#include <apr_time.h>
#include "ci_supervisor_wire.h"

/* How long an answer that needs no sandbox's work may take. */
#define CI_SUP_ANSWER_WAIT apr_time_from_sec(10)

/* The socket's path, set by the parent before it forks children. */
void ci_supervisor_set_path(const char *path);

/* Connect to the supervisor and exchange HELLO: a blocking, O_CLOEXEC
 * socket, or -1 with *ERR. */
int ci_supervisor_connect(apr_pool_t *p, const char **err);

/* One directory operation REQ (JSON, ci_directory_ops.h): 0 with *ANSWER (JSON
 * text from P), or -1 with *ERR. */
int ci_supervisor_dir(apr_pool_t *p, const char *req, apr_size_t len,
                      const char **answer, const char **err);

/* The same in two steps, on this thread's connection: REQ sent without
 * waiting (0, or -1 with *ERR), then its answer read (0 with *ANSWER, or
 * -1 with *ERR). When the send failed, or the connection did since, the
 * receive asks REQ again: only for operations that may be applied twice.
 * Nothing else may be asked on this thread in between. */
int ci_supervisor_dir_send(apr_pool_t *p, const char *req, apr_size_t len,
                           const char **err);
int ci_supervisor_dir_receive(apr_pool_t *p, const char *req, apr_size_t len,
                              const char **answer, const char **err);

/* What the supervisor holds (STATUS, JSON): 0 with *ANSWER, or -1. */
int ci_supervisor_status(apr_pool_t *p, const char **answer, const char **err);

/* A file operation (FILEOP; REQ: {"container": ID, "op": {...}}, JSON of
 * LEN bytes): each NDJSON line the kernel answers, NUL-terminated in place,
 * goes to FN (which returns -1 to stop: the connection closes). 1 when the
 * operation ended, 0 when the container has no sandbox (so no files), -1
 * with *ERR.
 *
 * A put's data (UP, or NULL for any other operation): once FN returns 1
 * for a line (the kernel's "ready"), READ is drained into FILEDATA frames,
 * at most MAX bytes in all, then FILEEND: commit when READ reached its end
 * within MAX, else abandon. *OUTCOME says which (CI_UPLOAD_SENT,
 * CI_UPLOAD_SOURCE_FAILED, CI_UPLOAD_TOO_LARGE). */
typedef int (*ci_fileop_line_fn)(void *baton, const char *line, apr_size_t len);
typedef enum {
    CI_UPLOAD_NOT_STARTED = 0, CI_UPLOAD_SENT, CI_UPLOAD_SOURCE_FAILED,
    CI_UPLOAD_TOO_LARGE
} ci_upload_outcome;
typedef struct ci_fileop_upload {
    apr_ssize_t (*read)(void *baton, char *buf, apr_size_t len);
    void *baton;
    apr_int64_t max;             /* -1: no bound */
    ci_upload_outcome outcome;   /* out */
    apr_uint64_t sent;           /* out: bytes sent */
} ci_fileop_upload;
int ci_supervisor_fileop(apr_pool_t *p, const char *req, apr_size_t len,
                             ci_fileop_line_fn fn, void *baton, ci_fileop_upload *up,
                             const char **err);

/* Send one frame on FD (blocking). 0 or -1. */
int ci_sup_send(int fd, int type, apr_uint32_t id, const char *data, apr_size_t len);

/* A new connection with HELLO and the request TYPE (payload REQ, LEN bytes)
 * sent, and the supervisor's HELLO read with R: the socket (blocking,
 * O_CLOEXEC; the caller closes it), or -1 with *ERR. */
int ci_supervisor_open(apr_pool_t *p, int type, const char *req, apr_size_t len,
                       ci_sup_reader *r, const char **err);

/* The next frame from FD, read with R, by DEADLINE: 1, 0 on EOF or error,
 * -1 at the deadline. */
int ci_supervisor_read_frame(int fd, ci_sup_reader *r, apr_time_t deadline,
                             ci_sup_frame *f);

#endif
