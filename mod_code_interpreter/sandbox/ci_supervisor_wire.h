/*
 * ci_supervisor_wire.h - the wire protocol between httpd's children (and parent)
 * and the local sandbox supervisor, over a Unix stream socket. httpd-free.
 *
 * A frame: a 4-byte big-endian length N (the bytes that follow it), a 1-byte
 * type, a 4-byte big-endian sandbox id (0 when none), then N - 5 bytes of
 * payload. Every connection starts with HELLO carrying the client's protocol
 * version; the supervisor answers HELLO with its own and closes the
 * connection when it cannot speak the client's. Sandboxes are addressed by
 * the id the supervisor hands out: nothing a client sends picks another
 * connection's sandbox (ids are looked up among the connection's own).
 *
 *   client -> supervisor            supervisor -> client
 *   HELLO (payload: version)        HELLO (payload: version)
 *   CREATE (json {tag, def})        OK (id) | ERROR (message)
 *   WARM_TAKE (json {tag, def})     OK (id) | NONE
 *   WARM_SET (json [{def, count}])  OK       (the parent only)
 *   RUN (id, payload: code)         OUTPUT (id, NDJSON bytes)* then END (id,
 *                                   payload: 1 byte, a ci_exec_outcome; a
 *                                   second, CI_SUP_END_KEPT, when the run
 *                                   was interrupted and the interpreter
 *                                   lives on)
 *   INTERRUPT (id)                  (the running execution ends with END)
 *   DESTROY (id)                    OK (id)
 *   STATUS                          STATUS (json)
 *   ATTACH (json {tag: CONTAINER_ID, OK (id) once ready | ERROR (message)
 *           def})
 *   DIR (json, ci_directory_ops.h)         DIR_ANSWER (json)
 *   FILEOP (json {container: ID,    NONE when the container has no sandbox;
 *           op: {op: list|get|      else OUTPUT (0, NDJSON lines of the
 *           delete|put, name?,      kernel's file operation)* then END
 *           max?, max_file?,
 *           max_files?,
 *           max_bytes?}})
 *   FILEDATA (payload: bytes)       (a put's data, once the kernel's OUTPUT
 *                                   said {"type":"ready"})
 *   FILEEND (payload: 1 byte,       (the kernel answers, then END)
 *            1 commit, 0 abandon)
 *   SHELL (id, json {commands:      OUTPUT (id, NDJSON: a "command" line per
 *          [...], timeout_ms,       command that ran)* then END, as for RUN;
 *          max_output})             a payload not understood: END (not_run)
 *
 * A FILEOP takes its turn in the container's run queue like a RUN: no code
 * runs while the kernel reads, writes, lists or deletes files under
 * /mnt/data. A put's data is relayed to the kernel as chunks; while the
 * kernel is behind, the supervisor stops reading the connection. A
 * connection that goes before FILEEND abandons its put: nothing is written.
 *
 * A SHELL is a hosted shell call: it takes its turn like a RUN, bounded
 * as a whole by the tool's timeout, and the kernel gets the line
 * {"shell": {...}} the supervisor re-encodes from what it understood.
 *
 * A container's sandbox (ATTACH) is not the connection's: it stays when the
 * connection closes, any connection may attach to it, and their RUNs take
 * turns in arrival order. It goes when its container expires or is deleted
 * (DIR), or when the supervisor does.
 */
#ifndef CI_SUPERVISOR_WIRE_H
#define CI_SUPERVISOR_WIRE_H

#include <apr_pools.h>
#include "ci_exec.h"

struct ci_sandbox_def;
struct ci_shell_action;

#define CI_SUP_VERSION 5
#define CI_SUP_HEADER 9                     /* length + type + id */
#define CI_SUP_END_KEPT 1                   /* END's second byte */
#define CI_SUP_MAX_FRAME ((apr_size_t)64 * 1024 * 1024)
#define CI_SUP_MAX_COMMANDS 1000            /* a SHELL's commands */

typedef enum {
    CI_SUP_HELLO = 1,
    CI_SUP_CREATE = 2,
    CI_SUP_WARM_TAKE = 3,
    CI_SUP_WARM_SET = 4,
    CI_SUP_RUN = 5,
    CI_SUP_INTERRUPT = 6,
    CI_SUP_DESTROY = 7,
    CI_SUP_STATUS = 8,
    CI_SUP_ATTACH = 9,
    CI_SUP_DIR = 10,
    CI_SUP_FILEOP = 11,
    CI_SUP_FILEDATA = 12,
    CI_SUP_FILEEND = 13,
    CI_SUP_SHELL = 14,
    CI_SUP_OK = 16,
    CI_SUP_ERROR = 17,
    CI_SUP_NONE = 18,
    CI_SUP_OUTPUT = 19,
    CI_SUP_END = 20,
    CI_SUP_DIR_ANSWER = 21
} ci_sup_type;

/* ATTACH's ERROR for a container the supervisor's directory does not hold
 * as running (deleted or expired since the request found it): the child
 * answers the call as its container gone. */
#define CI_SUP_NOT_RUNNING "the container is not running"

typedef struct ci_sup_frame {
    int type;
    apr_uint32_t id;
    const char *data;       /* payload, NUL-terminated after LEN bytes */
    apr_size_t len;
} ci_sup_frame;

/* Encode a frame into a buffer from P; *OUTLEN is its size. */
char *ci_sup_encode(apr_pool_t *p, int type, apr_uint32_t id, const char *data,
                    apr_size_t len, apr_size_t *outlen);
/* Write the 9-byte header of a frame with LEN bytes of payload into HDR. */
void ci_sup_header(unsigned char hdr[CI_SUP_HEADER], int type, apr_uint32_t id,
                   apr_size_t len);

/* An incremental frame reader: bytes in, whole frames out. */
typedef struct ci_sup_reader ci_sup_reader;
ci_sup_reader *ci_sup_reader_create(apr_pool_t *p);
/* Add LEN bytes. -1 when a frame is malformed or larger than the maximum
 * (the peer is dropped), else 0. */
int ci_sup_reader_feed(ci_sup_reader *r, const char *data, apr_size_t len);
/* The next whole frame, valid until the next call: 1, or 0 when none. */
int ci_sup_reader_next(ci_sup_reader *r, ci_sup_frame *out);
/* Whether the stream was refused (a bad length): drop the peer. */
int ci_sup_reader_broken(const ci_sup_reader *r);

/* The payloads. Every text is JSON; memory from P. */
const char *ci_sup_hello(apr_pool_t *p, apr_size_t *len);
/* The peer's version from a HELLO payload, -1 when malformed. */
int ci_sup_hello_version(const ci_sup_frame *f);

/* The whole local sandbox definition (no secrets: local has none). */
const char *ci_sup_def_encode(apr_pool_t *p, const struct ci_sandbox_def *d);
/* CREATE and WARM_TAKE: {"tag": TAG, "def": DEF}. */
const char *ci_sup_create_encode(apr_pool_t *p, const struct ci_sandbox_def *d,
                                 const char *tag, apr_size_t *len);
/* Parse a CREATE/WARM_TAKE payload; *DEFTEXT is the canonical def text (what
 * warm pools are keyed by). NULL, or why not. */
const char *ci_sup_create_decode(apr_pool_t *p, const ci_sup_frame *f,
                                 struct ci_sandbox_def **def, const char **tag,
                                 const char **deftext);

/* WARM_SET: a list of (def, count). */
typedef struct ci_sup_want {
    struct ci_sandbox_def *def;
    const char *deftext;
    int count;
} ci_sup_want;
const char *ci_sup_warm_encode(apr_pool_t *p, const struct ci_sandbox_def *const *defs,
                               int n, apr_size_t *len);
/* An array of ci_sup_want, or NULL with *ERR. */
apr_array_header_t *ci_sup_warm_decode(apr_pool_t *p, const ci_sup_frame *f,
                                       const char **err);

/* SHELL: {"commands": [...], "timeout_ms": N, "max_output": M}, the
 * timeout rounded up to a millisecond and both bounded to what decode
 * accepts. */
const char *ci_sup_shell_encode(apr_pool_t *p, const struct ci_shell_action *a,
                                apr_size_t *len);
/* Check a SHELL payload (an object; commands: 1 to CI_SUP_MAX_COMMANDS
 * strings; timeout_ms: 1 ms to CI_MAX_SECONDS; max_output: 0 to
 * CI_HARD_OUTPUT_CAP) and make the kernel's line from what was understood:
 * *LINE is {"shell": {...}}, re-encoded, without its newline (*LEN bytes).
 * NULL, or why not. */
const char *ci_sup_shell_decode(apr_pool_t *p, const ci_sup_frame *f, const char **line,
                                apr_size_t *len);

#endif
