/*
 * ci_supervisor_internal.h - what the local sandbox supervisor's files
 * share: its state (one, as there is one thread), its sandboxes and
 * connections, and what each file offers the others. Not for use outside
 * the supervisor (ci_supervisor.h is its public side).
 *
 * Its files, from the bottom up: each calls only files listed above it
 * (scripts/check-circles.py holds them to it). What happens below that a
 * file above must act on is told up by a return value, or by a function
 * the file above hands down, never by a call up.
 *
 *   ci_supervisor_state.c       the daemon's state, the output queue, the
 *                               frames sent to a connection
 *   ci_supervisor_procs.c       processes as /proc shows them: parents, a
 *                               sandbox's tree, its interpreter, its memory;
 *                               threads moved to SCHED_IDLE
 *   ci_supervisor_cgroup.c      a cgroup v2 per sandbox
 *   ci_supervisor_egress.c      the egress proxy: started on need, a
 *                               listener per sandbox with an allowlist
 *   ci_supervisor_boxes.c       sandboxes by id: forked, started, killed,
 *                               freed; their slot, who hears them, a
 *                               container's by its id; children reaped
 *   ci_supervisor_warm.c        warm pools
 *   ci_supervisor_files.c       file operations on the kernel's side: the
 *                               output watched for its end, a put's data
 *                               and its limits measured outside
 *   ci_supervisor_runs.c        what runs in sandboxes: the requests on
 *                               them, runs and containers' run queues,
 *                               relayed output, deadlines and interrupts
 *   ci_supervisor_watch.c       once a second: sandboxes' processes held to
 *                               their CPU and memory
 *   ci_supervisor_skills.c      the node's skill records hosted here (DIR
 *                               questions about skills), their store's
 *                               unnamed bundles removed
 *   ci_supervisor_containers.c  the container directory hosted here (DIR),
 *                               containers' sandboxes (ATTACH), expiry
 *   ci_supervisor.c             the entry, the poll loop, connections and
 *                               their frames, peer checks, status
 */
#ifndef CI_SUPERVISOR_INTERNAL_H
#define CI_SUPERVISOR_INTERNAL_H

#include <sys/types.h>
#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>
#include "ci_directory.h"
#include "ci_exec.h"
#include "ci_ndjson.h"
#include "ci_sandbox.h"
#include "ci_supervisor.h"
#include "ci_supervisor_wire.h"

#define READ_CHUNK 65536
#define BACKLOG_MAX ((apr_size_t)1024 * 1024)   /* stop reading a sandbox past it */
#define TICK_MS 1000
#define PROCS_MAX 256
#define FILEOP_TIMEOUT apr_time_from_sec(300)   /* without progress (fileop_progress) */
#define FILEOP_DRAIN apr_time_from_sec(30)   /* then, the kernel's to end it */
/* How a file operation's output ends: this exact line (the kernel's
 * json.dumps; a name inside a line is escaped, never this line). */
#define FILEOP_END "\n{\"type\": \"end_of_execution\"}\n"
#define FILEOP_END_LEN (sizeof(FILEOP_END) - 1)
/* What a queued run is (queued.raw, begin_run's RAW). */
#define RAW_CODE 0                              /* code: wrapped as {"code": ...} */
#define RAW_FILEOP 1                            /* a file operation's line */
#define RAW_PUT 2                               /* ... a put, data to follow */
#define RAW_SHELL 3                             /* a shell call's line: an
                                                   execution, not a file op */

/* ---- an output queue (ci_supervisor_state.c) ---------------------------- */

typedef struct outq {
    char *buf;
    apr_size_t start, used, cap;
} outq;

/* Queue LEN bytes of DATA. -1 out of memory. */
int sup_outq_add(outq *q, const void *data, apr_size_t len);
/* The bytes still to write. */
apr_size_t sup_outq_len(const outq *q);
/* Write what FD (a socket: IS_SOCKET) takes now. -1 when the peer is gone. */
int sup_outq_flush(outq *q, int fd, int is_socket);
void sup_outq_free(outq *q);

/* ---- state -------------------------------------------------------------- */

typedef struct conn conn;
typedef struct want want;       /* a warm pool (ci_supervisor_warm.c) */

/* A RUN waiting for a container's sandbox (malloc'd: the box lives long). */
typedef struct queued {
    conn *from;
    char *code;
    apr_size_t len;
    int raw;                    /* RAW_*: but for RAW_CODE, CODE is the
                                   kernel's whole line */
    struct queued *next;
} queued;

/* A connection waiting for an ATTACH to be answered. */
typedef struct waiter {
    conn *c;
    struct waiter *next;
} waiter;

typedef enum { BOX_STARTING, BOX_IDLE, BOX_RUNNING, BOX_DEAD } box_state;

typedef struct box {
    apr_uint32_t id;
    apr_pool_t *pool;
    ci_sandbox_def *def;
    const char *deftext;
    const char *tag;
    pid_t pid;
    int in_fd, out_fd, err_fd;
    outq input;                 /* the code line on its way to the kernel */
    ci_ndjson *nd;              /* the output of its start or its run */
    apr_pool_t *nd_pool;        /* ND's, cleared for each: a container's
                                   sandbox lives long, and what one run's
                                   lines held must not pile up */
    box_state state;
    apr_time_t deadline;        /* of the start or of the execution */
    conn *owner;                /* NULL: warm */
    want *warm;                 /* the pool it belongs to while warm */
    int slot;                   /* the registry slot of a warm one, -1 */
    int counted_warm;           /* the registry counts it as warm */
    const char *container;      /* the container it is the sandbox of, or NULL */
    conn *runner;               /* a container's: whose run is in progress */
    queued *runq;               /* a container's: runs waiting their turn */
    waiter *waiters;            /* a container's: ATTACHes not yet answered */
    ci_exec_outcome interrupted;/* a container's run was interrupted (SIGINT)
                                   for this reason; COMPLETED: it was not */
    pid_t procs[PROCS_MAX];     /* its processes, as last read from /proc */
    int nprocs;
    apr_time_t procs_at;        /* when (0: never) */
    int ran_since_scan;         /* code ran since: found again next second */
    pid_t kernel_pid;           /* its interpreter (the one process not at
                                   SCHED_IDLE), 0: not yet found */
    int fileop;                 /* the run in progress is a file operation */
    int upload;                 /* ... a put whose data is still coming from
                                   its runner */
    apr_int64_t put_room;       /* the bytes the put may write (max_file=,
                                   and max_bytes= less the other files, as
                                   measured here); -1: no bound */
    apr_uint64_t put_sent;      /* the bytes relayed so far */
    const char *put_refusal;    /* past its room: the outcome its client
                                   gets, whatever the kernel says */
    char tail[FILEOP_END_LEN + 1];  /* a file operation's last output bytes */
    apr_size_t tail_len;
    const char *egress_dir;     /* with an allowlist: the directory of its
                                   egress socket, mounted inside; NULL */
    const char *cgroup;         /* the name of its sandbox's cgroup under
                                   cfg->cgroup_dir (one per start), or NULL */
    struct box *next;
} box;

struct conn {
    int fd;
    pid_t pid;
    int helloed, is_parent, closing;
    int handling;               /* its frames are being handled (a lookup
                                   that missed may read the others meanwhile) */
    ci_sup_reader *reader;
    apr_pool_t *pool;
    outq out;
    box *attached;              /* the container sandbox it attached to */
    struct conn *next;
};

/* The daemon's state: one, as there is one thread (ci_supervisor_state.c). */
typedef struct sup_daemon {
    apr_pool_t *p;
    const ci_sup_config *cfg;
    box *boxes;
    conn *conns;
    want *wants;
    apr_uint32_t next_id;
    int refill_due;             /* at the end of this turn of the loop, or the
                                   cap refused a warm slot: retry each tick */
    ci_directory *dir;
    apr_hash_t *by_container;   /* container id -> its box */
    apr_time_t next_expiry_check;
    apr_uint32_t cgroup_seq;    /* the last sandbox cgroup's number */
    int cgroup_sweep_due;       /* an ended sandbox's cgroup is not removed
                                   yet (its processes still exiting) */
} sup_daemon;

extern sup_daemon sup_state;

/* ---- ci_supervisor_state.c: frames to a connection ---------------------- */

void sup_send_frame(conn *c, int type, apr_uint32_t id, const char *data,
                    apr_size_t len);
void sup_send_text(conn *c, int type, apr_uint32_t id, const char *text);
void sup_send_end(conn *c, apr_uint32_t id, ci_exec_outcome outcome);
/* The run ended with OUTCOME after an interrupt its interpreter survived. */
void sup_send_end_kept(conn *c, apr_uint32_t id, ci_exec_outcome outcome);

/* ---- ci_supervisor_procs.c: processes ----------------------------------- */

/* PID's parent, or -1. */
pid_t sup_parent_of(pid_t pid);
/* Whether PID runs bubblewrap. */
int sup_is_bwrap(pid_t pid);
/* Every process of the host with its parent (for sup_descendants). */
apr_array_header_t *sup_proc_parents(apr_pool_t *p);
/* ROOT and every process under it in ALL, into OUT (at most MAX). */
int sup_descendants(const apr_array_header_t *all, pid_t root, pid_t *out, int max);
/* Resident bytes of the N processes of PIDS. */
apr_uint64_t sup_resident(const pid_t *pids, int n);
/* B's interpreter among its processes as last found (b->procs), or 0. */
pid_t sup_find_kernel(const box *b);
/* Every thread of PID but KEEP to SCHED_IDLE: how many were moved. */
int sup_idle_threads(pid_t pid, pid_t keep);

/* ---- ci_supervisor_cgroup.c: a cgroup v2 per sandbox ------------------- */

/* Whether sandboxes' CPU is held in their cgroups (cgroups are on and the
 * cpu controller is enabled for them). */
int sup_cgroups_hold_cpu(void);
/* B's cgroup for its next start, with its bounds: the descriptor its child
 * joins by (close it after the spawn), -1 when cgroups are off, -2 when it
 * could not be made (the sandbox is then not started). */
int sup_cgroup_open(box *b);
/* B's cgroup ended: every process in it killed, the cgroup removed (or
 * removed by a later sweep while its processes exit). */
void sup_cgroup_end(box *b);
/* Once a second: the cgroups of ended sandboxes that could not be
 * removed at once (and, at start, what the parent's sweep of an earlier
 * supervisor's left exiting) removed. */
void sup_cgroup_sweep(void);
/* The cgroup part of sup_cpu_mode_text, for the log and status. */
const char *sup_cgroup_text(apr_pool_t *p);

/* ---- ci_supervisor_egress.c: the egress proxy ------------------------ */

/* B (whose def has an allowlist) gets its egress directory and socket, the
 * proxy listening on it with B's policy. 0, or -1. */
int sup_egress_open(box *b);
/* B's socket and directory go; the proxy forgets it. */
void sup_egress_close(box *b);
/* An execution starts in B: the proxy starts its byte budget again. */
void sup_egress_execution(box *b);
/* B (warm until now) became its container's: the proxy learns the
 * container and its owner. */
void sup_egress_claim(box *b);
/* A child PID was reaped: 1 when it was the proxy (started again). */
int sup_egress_reaped(pid_t pid);

/* ---- ci_supervisor_boxes.c: sandboxes ----------------------------------- */

/* Kill B's sandbox and let go of its descriptors (B stays, DEAD). */
void sup_box_kill(box *b);
/* B goes: unlisted, its waiters told, its slot released, its pool gone. */
void sup_box_free(box *b);
/* Fork B's sandbox (again): 0, or -1. */
int sup_box_spawn(box *b);
/* Start a sandbox of DEF: a new box, or NULL with *ERR. */
box *sup_box_start(const ci_sandbox_def *def, const char *deftext, const char *tag,
                   const char **err);
/* B's registry slot given back (a warm one's, as a connection takes it). */
void sup_box_release_slot(box *b);
/* A container's sandbox goes: its waiters get WHY, its queued runs and its
 * run in progress end LOST, its connections are detached. */
void sup_release_waiting(box *b, const char *why);
/* A fresh reader of B's output, for its start or its next run. */
void sup_fresh_reader(box *b);
/* Who hears B's output: its connection, or its container's runner. */
conn *sup_client_of(const box *b);
/* The box with ID that C owns (or is attached to), or NULL. */
box *sup_owned(conn *c, apr_uint32_t id);
/* Container ID's sandbox, or NULL. */
box *sup_container_box(const char *id);
/* B's container was used now (the directory's clock). */
void sup_touch_container(box *b);
/* Each turn of the loop: children reaped. */
void sup_reap_strays(void);

/* ---- ci_supervisor_warm.c: warm pools ----------------------------------- */

/* Start what the pools lack (sup_state.refill_due again when it cannot). */
void sup_refill(void);
/* A ready warm sandbox of DEFTEXT, or NULL. */
box *sup_warm_ready(const char *deftext);
void sup_handle_warm_set(conn *c, const ci_sup_frame *f);
/* The pools the configuration asks for at start (sup_state.cfg->wants). */
void sup_start_wants(apr_pool_t *p);

/* ---- ci_supervisor_files.c: file operations, the kernel's side ---------- */

/* A put's limits measured outside: NULL, or the refusal to answer. */
const char *sup_put_limits(box *b, const char *line, apr_size_t len);
/* A file operation answered here with TYPE, and the run over. */
void sup_answer_fileop(box *b, conn *c, const char *type);
/* The end of B's put: committed, or abandoned. */
void sup_end_upload(box *b, int commit);
/* A file operation's output: relayed, watched for its end. 1 when it ended
 * (B idle again: its queue's next run may start), else 0. */
int sup_fileop_output(box *b, const char *buf, apr_size_t n);
/* C's put is ahead of its kernel: C is not read meanwhile. */
int sup_uploading_ahead(const conn *c);
/* Request: FILEDATA or FILEEND. */
void sup_handle_filedata(conn *c, const ci_sup_frame *f);

/* ---- ci_supervisor_runs.c: runs ----------------------------------------- */

/* Stop B's execution with OUTCOME: the sandbox is killed. */
void sup_stop_run(box *b, ci_exec_outcome outcome);
/* C leaves its container's queue, and its run in progress. */
void sup_detach(conn *c);
/* Requests: CREATE and WARM_TAKE (TAKE), RUN, SHELL, FILEOP, INTERRUPT,
 * DESTROY. */
void sup_handle_create(conn *c, const ci_sup_frame *f, int take);
void sup_handle_run(conn *c, const ci_sup_frame *f);
void sup_handle_shell(conn *c, const ci_sup_frame *f);
void sup_handle_fileop(conn *c, const ci_sup_frame *f);
void sup_handle_interrupt(conn *c, const ci_sup_frame *f);
void sup_handle_destroy(conn *c, const ci_sup_frame *f);
/* B's kernel wrote: its output, relayed. */
void sup_box_readable(box *b);
/* Each turn of the loop: deadlines reached. */
void sup_check_deadlines(void);

/* ---- ci_supervisor_watch.c: sandboxes' processes held ------------------- */

/* Once a second: every thread of each sandbox but its interpreter's main
 * thread moved to SCHED_IDLE; sandboxes over their memory bound killed. */
void sup_watch_processes(void);
/* How sandboxes' CPU is held: a word for status, a sentence for the log. */
const char *sup_cpu_mode(void);
const char *sup_cpu_mode_text(apr_pool_t *p);

/* ---- ci_supervisor_skills.c: skills ------------------------------------- */

/* A DIR question about skills (ci_skill_ops.h), answered: 1; 0 when F is
 * not one (the container directory's). */
int sup_handle_skill(conn *c, const ci_sup_frame *f);
/* Container ID ended (its record stays a while): the bundles only it
 * showed, removed. */
void sup_skills_container_gone(const char *id);
/* Now and then: the known stores swept of what nothing names. */
void sup_skills_sweep(void);

/* ---- ci_supervisor_containers.c: containers ----------------------------- */

/* At start: the index of containers' sandboxes, and the directory's busy
 * probe over it. */
void sup_start_containers(apr_pool_t *p);
void sup_handle_attach(conn *c, const ci_sup_frame *f);
/* DIR: READ_OTHERS reads and handles what the other connections hold
 * already (the loop's), for a lookup that missed. */
void sup_handle_dir(conn *c, const ci_sup_frame *f, void (*read_others)(void));
/* Once a second: expiry, and the sandboxes' processes held to their CPU
 * and memory (sup_watch_processes). */
void sup_expire_containers(void);

#endif
