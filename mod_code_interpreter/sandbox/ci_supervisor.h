/*
 * ci_supervisor.h - the local sandbox supervisor: one process per server,
 * forked by httpd's parent, that owns every local sandbox as its direct
 * child and serves httpd's children over a Unix socket (ci_supproto.h).
 * httpd-free: the glue (httpd/ci_supd.c) forks it, drops its privileges and
 * hands it the registry's slot functions.
 */
#ifndef CI_SUPERVISOR_H
#define CI_SUPERVISOR_H

#include <sys/types.h>
#include <apr_pools.h>
#include "ci_sandbox.h"

/* What the supervisor needs from the server: the registry's slots, so that
 * warm sandboxes count toward CodeInterpreterMaxSandboxes. */
typedef struct ci_sup_hooks {
    int (*claim)(const char *tool);          /* a slot, or -1 at the cap */
    void (*set_warm)(int slot, int warm);
    void (*release)(int slot);
} ci_sup_hooks;

typedef struct ci_sup_config {
    int listen_fd;           /* listening, O_CLOEXEC */
    pid_t parent;            /* httpd's parent: peers must be its children */
    uid_t uid;               /* children's uid */
    const ci_sup_hooks *hooks;
    const char *wants;       /* a WARM_SET payload to start with, or NULL */
    apr_size_t wants_len;
} ci_sup_config;

/* The supervisor's loop. Returns only when the listening socket fails. */
void ci_supervisor_run(apr_pool_t *p, const ci_sup_config *cfg);

/* ---- for the local provider's client side (httpd's children) ---------- */

/* The socket's path, set by the parent before it forks children. */
void ci_supervisor_set_path(const char *path);
const char *ci_supervisor_path(void);

/* Connect to the supervisor and exchange HELLO: a blocking, O_CLOEXEC
 * socket, or -1 with *ERR. */
int ci_supervisor_connect(apr_pool_t *p, const char **err);

/* One directory operation REQ (JSON, ci_supdir.h): 0 with *ANSWER (JSON
 * text from P), or -1 with *ERR. */
int ci_supervisor_dir(apr_pool_t *p, const char *req, apr_size_t len,
                      const char **answer, const char **err);

/* What the supervisor holds (STATUS, JSON): 0 with *ANSWER, or -1. */
int ci_supervisor_status(apr_pool_t *p, const char **answer, const char **err);

/* A file operation (FILEOP; REQ: {"container": ID, "op": {...}}, JSON of
 * LEN bytes): each NDJSON line the kernel answers, NUL-terminated in place,
 * goes to FN (which returns -1 to stop: the connection closes). 1 when the
 * operation ended, 0 when the container has no sandbox (so no files), -1
 * with *ERR. */
typedef int (*ci_fileop_line_fn)(void *baton, const char *line, apr_size_t len);
int ci_supervisor_fileop(apr_pool_t *p, const char *req, apr_size_t len,
                         ci_fileop_line_fn fn, void *baton, const char **err);

/* A put's data: once FN returns 1 for a line (the kernel's "ready"), READ
 * is drained into FILEDATA frames, at most MAX bytes in all, then FILEEND:
 * commit when READ reached its end within MAX, else abandon. *OUTCOME says
 * which (CI_UPLOAD_SENT, CI_UPLOAD_SOURCE_FAILED, CI_UPLOAD_TOO_LARGE). */
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
int ci_supervisor_fileop_put(apr_pool_t *p, const char *req, apr_size_t len,
                             ci_fileop_line_fn fn, void *baton, ci_fileop_upload *up,
                             const char **err);

/* Send one frame on FD (blocking). 0 or -1. */
int ci_sup_send(int fd, int type, apr_uint32_t id, const char *data, apr_size_t len);

/* ---- for the supervisor, from the local provider ----------------------- */

/* Fork the bubblewrap process of DEF (the supervisor's main thread). */
apr_status_t ci_local_spawn(apr_pool_t *p, const ci_sandbox_def *def, pid_t *pid,
                            int *in_fd, int *out_fd, int *err_fd);


#endif
