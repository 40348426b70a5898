/*
 * ci_provider.h - a sandbox provider, as another module implements one:
 * the provider table's entry (ci_provider), its capabilities (CI_CAP_...),
 * the sandbox tool it is handed (ci_sandbox_def) and the types of container
 * files. Installed with mod_code_interpreter.h; every type an entry uses is
 * here, in ci_exec.h (what a run returns) or in ci_cfiles.h (a file listing).
 *
 * Threads: start/run/destroy are called from worker threads, one at a time
 * per sandbox; interrupt may be called from any thread while run is blocked.
 * All memory comes from the pool handed to start, which belongs to the
 * sandbox alone (its own allocator), never to a request pool.
 */
#ifndef CI_PROVIDER_H
#define CI_PROVIDER_H

#include <sys/types.h>
#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>
#include "ci_declare.h"
#include "ci_exec.h"
#include "ci_cfiles.h"

typedef struct ci_provider ci_provider;
typedef struct ci_sandbox ci_sandbox;

/* ---- container files ------------------------------------------------------
 * A container's files are the regular files directly under /mnt/data of its
 * sandbox. The code in the sandbox controls that tree (symlinks, FIFOs,
 * sparse files, odd names), so a provider reads and writes it through the
 * sandbox's own view - never by resolving a sandbox path on the host - and
 * follows no symlink: a name that is not a regular file is not a file. */

/* Which container's files: its tool (in its memory tier), its id, and what
 * the provider's handle entry returned for it (unsealed; NULL when the id is
 * enough or it has no sandbox yet). */
typedef struct ci_file_target {
    const struct ci_sandbox_def *def;
    const char *container;
    const char *handle;
} ci_file_target;

typedef enum {
    CI_FILE_OK = 0,
    CI_FILE_NO_SANDBOX,    /* the container has no sandbox (so no files) */
    CI_FILE_NOT_FOUND,     /* no regular file of that name */
    CI_FILE_TOO_LARGE,     /* get: larger than MAX; put: passed max_file */
    CI_FILE_TOO_MANY,      /* put: a new file past max_files */
    CI_FILE_NO_ROOM,       /* put: the container's files would pass max_bytes */
    CI_FILE_SOURCE_FAILED, /* put: the source's read failed (nothing written) */
    CI_FILE_SINK_FAILED,   /* get: the sink refused (the client left) */
    CI_FILE_FAILED         /* the provider failed: *ERR says why (no secret) */
} ci_file_status;

/* A download's destination: SIZE once, with the file's size, before any
 * DATA; DATA with each piece. A nonzero return stops the download
 * (CI_FILE_SINK_FAILED). */
typedef struct ci_file_sink {
    int (*size)(void *baton, apr_int64_t bytes);
    int (*data)(void *baton, const char *buf, apr_size_t len);
    void *baton;
} ci_file_sink;

/* An upload's origin: READ fills up to LEN bytes of BUF and returns how many,
 * 0 at the end, or -1 when it failed (the upload is abandoned). */
typedef struct ci_file_source {
    apr_ssize_t (*read)(void *baton, char *buf, apr_size_t len);
    void *baton;
} ci_file_source;

/* The operator's limits on uploads (max_file=, max_files=, max_bytes=);
 * 0: none. */
typedef struct ci_file_limits {
    apr_uint64_t max_file;     /* bytes of one file */
    apr_uint64_t max_files;    /* files in the container */
    apr_uint64_t max_bytes;    /* bytes of all its files */
} ci_file_limits;

/* One declared sandbox tool: the keys every provider shares; the provider's
 * own (CONF) are behind an opaque pointer that only its file reads. */
typedef struct ci_sandbox_def {
    const char *name;
    const ci_provider *provider;
    apr_interval_time_t timeout;   /* per execution */
    apr_size_t max_output;         /* bytes of output the model sees */
    /* containers */
    int idle;                      /* seconds unused before one expires */
    int max_idle;                  /* the most a client may ask (expires_after) */
    int retention;                 /* seconds an expired one stays answerable */
    /* memory tiers (memory_limit): name -> what it means here, as written
     * in tiers= ("1g:768M,4g:3G"); NULL: the one tier "1g", the tool as
     * declared. The provider's tier entry applies a value to a def. */
    const char *tiers;
    ci_file_limits files;          /* uploads: max_file=, max_files=, max_bytes= */
    apr_uint64_t rss_bound;        /* resident memory of the whole sandbox, for a
                                      provider that bounds it here (and the
                                      memory budget counts); 0: none */
    int warm;                      /* sandboxes kept ready (CI_CAP_WARM) */
    int network;                   /* code in it reaches the internet (the
                                      function's description says so) */
    /* network allowlists (CI_CAP_EGRESS): the operator's ceiling ... */
    int egress;                    /* egress=allowlist: clients may ask for one */
    const char *allowed_domains;   /* the patterns they may list, comma
                                      separated, normalised; NULL: any */
    const char *egress_proxy;      /* http://HOST:PORT, the site's forward
                                      proxy allowed traffic goes through */
    const char *egress_ca;         /* the CAs origins are verified against
                                      where the proxy terminates TLS (domain
                                      secrets); NULL: the system's */
    /* ... and one container's: the domains its sandbox may reach, comma
     * separated, normalised (ci_sandbox_def_allowlist); NULL: no network */
    const char *allowlist;
    /* its domain secrets, open: a JSON array of {domain, name, placeholder,
     * value}; NULL: none. Only in memory, never logged. */
    const char *secrets;
    void *conf;                    /* the provider's own keys */
    /* one container's skills (CI_CAP_SKILLS): a JSON array of {mount, tree,
     * zip}, each a skill's folder to show read-only at
     * /home/oai/skills/MOUNT/ (MOUNT: its name, '-' and 32 hex digits),
     * whose files are the folder TREE of the server's skill store and, as
     * one zip, the file ZIP (absolute paths); NULL: none. Last, so that a
     * provider built against an earlier header reads the fields above
     * where they were. */
    const char *skills;
} ci_sandbox_def;

/* What a provider can do (its caps): */
#define CI_CAP_WARM       0x01   /* start sandboxes ahead of need (warm=, warm_take) */
#define CI_CAP_REMOTE     0x02   /* its sandboxes outlive the process that made
                                    them: remote_id, reap, a container's handle */
#define CI_CAP_CONTAINERS 0x04   /* containers: attach, release (keep_alive) */
#define CI_CAP_FILES      0x08   /* container files: files_list ... file_put */
#define CI_CAP_SHELL      0x10   /* the hosted shell: run_commands */
#define CI_CAP_EGRESS     0x20   /* network allowlists (egress=allowlist) */
#define CI_CAP_SITE_PROXY 0x40   /* ... through the site's proxy (egress_proxy=) */
#define CI_CAP_SECRETS    0x80   /* ... with domain secrets its proxy injects */
#define CI_CAP_SKILLS     0x100  /* skills shown in its containers (def->skills) */

/* Where a container's skills are, and how many one container may have. */
#define CI_SKILLS_ROOT "/home/oai/skills"
#define CI_MAX_SKILLS 200

/* Credentials a provider needs to delete one of its sandboxes from another
 * process (what a dead child left). LOCATOR is not secret; SECRET is. */
typedef struct ci_reap_cred {
    const char *locator;
    const char *secret;
} ci_reap_cred;

struct ci_provider {
    const char *name;
    unsigned caps;                 /* CI_CAP_... */
    /* The keys this provider accepts besides the common ones, for messages. */
    const char *keys;
    /* Give D the provider's own configuration (D->conf, from P) with its
     * defaults, and its defaults of common keys (the common ones are set). */
    void (*defaults)(apr_pool_t *p, ci_sandbox_def *d);
    /* A copy of CONF (from P), for a def changed by a tier. */
    void *(*conf_copy)(apr_pool_t *p, const void *conf);
    /* A text naming every non-secret key of D's own (the registry keeps a
     * digest: two tools of the same text behave the same). */
    const char *(*fingerprint)(apr_pool_t *p, const ci_sandbox_def *d);
    /* Parse KEY=V into D. *KNOWN = 0 when KEY is not this provider's.
     * Returns NULL or an error message naming the value and what is expected. */
    const char *(*parse_key)(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                             const char *v, int *known);
    /* At configuration load: resolve what the def names indirectly (an API
     * key from env:/file:). NULL: nothing to resolve. The message never
     * holds a secret. */
    const char *(*resolve)(apr_pool_t *p, ci_sandbox_def *d);
    /* At start-up (parent, as root, before children exist): start a real
     * sandbox of D as UID/GID and stop it. NULL: nothing to check. */
    apr_status_t (*probe)(apr_pool_t *p, const ci_sandbox_def *d, uid_t uid,
                          gid_t gid, const char **err);
    /* Start a sandbox for D. TAG is the container's id (for metadata and
     * logs; never a secret). On failure *ERR says why, without secrets. */
    apr_status_t (*start)(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                          ci_sandbox **out, const char **err);
    /* Run CODE to completion, timeout or interruption; RES memory from P. A
     * failed outcome (ci_exec_failed) means the interpreter is gone: the
     * caller destroys the sandbox. */
    apr_status_t (*run)(ci_sandbox *sb, apr_pool_t *p, const char *code,
                        ci_exec_result *res);
    /* Run a hosted shell call (CI_CAP_SHELL): each command with bash -c in
     * /mnt/data, in a process group of its own, one after another; a command
     * past ACTION->timeout has its group killed and ends the call (the
     * commands after it do not run). A process a command leaves running
     * does not hold the call open; it lives on, within the sandbox's
     * limits, until the sandbox ends. RES->commands: one entry per command
     * that ran; RES->outcome is CI_EXEC_COMPLETED when the commands ran
     * (whatever their exit codes, a timeout too), else a failed outcome as
     * for run, the whole call bounded by the tool's timeout as an execution
     * is. Memory from P. NULL: the provider has no shell. */
    apr_status_t (*run_commands)(ci_sandbox *sb, apr_pool_t *p,
                                 const ci_shell_action *action, ci_exec_result *res);
    /* Make a blocked run return now with CI_EXEC_INTERRUPTED. */
    void (*interrupt)(ci_sandbox *sb);
    /* Release the sandbox. Never fails the request; logs what it could not do. */
    void (*destroy)(ci_sandbox *sb);
    /* The provider's own id of a remote sandbox (kept in the server's
     * registry so that a dead child's sandbox can be found), or NULL when
     * the sandbox dies with the process that made it. */
    const char *(*remote_id)(ci_sandbox *sb);
    /* The credentials reap needs for sandboxes of D; 0 when D has none. */
    int (*reap_cred)(const ci_sandbox_def *d, ci_reap_cred *out);
    /* Delete the remote sandbox ID made with CRED (blocking). APR_SUCCESS
     * when it is gone (deleted now or already). */
    apr_status_t (*reap)(const ci_reap_cred *cred, const char *id, const char **err);
    /* Delete the remote sandbox a container's HANDLE (what handle returned)
     * reaches, made with CRED (blocking): as reap. NULL: the provider's
     * containers have no remote sandbox. */
    apr_status_t (*reap_handle)(const ci_reap_cred *cred, const char *handle,
                                const char **err);
    /* A sandbox of D started ahead of need (CI_CAP_WARM), for the container
     * or request TAG: 1 with *OUT (its memory from P), 0 when none is ready. */
    int (*warm_take)(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                     ci_sandbox **out);

    /* ---- containers: a sandbox that outlives the process using it ----
     * A container's sandbox is reached with attach from any child, used,
     * and let go with release; destroy deletes it. */
    /* Reach the sandbox of container CONTAINER_ID. HANDLE is what handle
     * returned for it earlier, or NULL when it has no sandbox yet: then one
     * is started for it, kept alive for IDLE_SECONDS without use. Failed
     * outcomes of run do not end a container's sandbox: the provider
     * recovers it (an empty interpreter) for the next run. APR_NOTFOUND
     * when HANDLE's sandbox is gone at the provider (its lifetime cap). */
    apr_status_t (*attach)(apr_pool_t *p, const ci_sandbox_def *d,
                           const char *container_id, const char *handle,
                           int idle_seconds, ci_sandbox **out, const char **err);
    /* What attach needs to reach SB again from another process (secret: it
     * may hold credentials), or NULL when the container id is enough. */
    const char *(*handle)(ci_sandbox *sb, apr_pool_t *p);
    /* It was used: keep it alive IDLE_SECONDS from now. NULL: nothing to do. */
    apr_status_t (*keep_alive)(ci_sandbox *sb, int idle_seconds, const char **err);
    /* Let SB go, leaving the sandbox running for the next attach. */
    void (*release)(ci_sandbox *sb);
    /* Make D the memory tier VALUE (from tiers=): NULL or why not. NULL
     * entry: the provider offers only the default tier. */
    const char *(*tier)(apr_pool_t *p, ci_sandbox_def *d, const char *value);

    /* ---- container files (see ci_file_target). Blocking; from any
     * thread; each takes its turn with the container's runs where the
     * provider can order them. Memory from P. None of them starts a
     * sandbox: a container without one has no files (CI_FILE_NO_SANDBOX);
     * attach first to put a file into a new container. */
    /* The files: an array of ci_cfile (ci_cfiles.h: ids computed, sorted). */
    ci_file_status (*files_list)(apr_pool_t *p, const ci_file_target *t,
                                 apr_array_header_t **files, const char **err);
    /* Stream the file NAME into SINK; CI_FILE_TOO_LARGE past MAX bytes
     * (nothing sent to the sink). */
    ci_file_status (*file_get)(apr_pool_t *p, const ci_file_target *t, const char *name,
                               apr_int64_t max, const ci_file_sink *sink,
                               const char **err);
    ci_file_status (*file_delete)(apr_pool_t *p, const ci_file_target *t,
                                  const char *name, const char **err);
    /* Write the file NAME (replacing one of that name, never through a
     * symlink) from SOURCE, within LIMITS (the file it replaces does not
     * count against them). All or nothing: on any failure the container's
     * files are as they were. */
    ci_file_status (*file_put)(apr_pool_t *p, const ci_file_target *t, const char *name,
                               const ci_file_limits *limits, const ci_file_source *src,
                               const char **err);
};

/* Output read from a provider is refused past this many bytes per execution,
 * whatever max_output says (images travel in it too). */
#define CI_HARD_OUTPUT_CAP ((apr_size_t)32 * 1024 * 1024)

#endif
