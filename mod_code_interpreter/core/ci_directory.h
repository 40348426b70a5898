/*
 * ci_directory.h - the directory of containers on one node: records, who
 * owns them, when they expire, the response ids and conversations that lead
 * to them, and the items the module returned (so that an item_reference to
 * one can be resolved and a chain through a round can be completed). A data
 * structure with no I/O and no locks: its host (the container supervisor,
 * one thread) serialises every call. Several nodes use Redis instead, with
 * the same semantics.
 *
 * Owners are keyed hashes (ci_crypto.h); nothing here compares anything but
 * those. Every lookup takes the caller's owner: another owner's container
 * reads exactly like an unknown one.
 *
 * Time is passed in (apr_time_t now) so that expiry is tested without
 * waiting.
 */
#ifndef CI_DIRECTORY_H
#define CI_DIRECTORY_H

#include <apr_hash.h>
#include <apr_pools.h>
#include <apr_tables.h>
#include <apr_time.h>

typedef enum {
    CI_CNTR_RUNNING = 0,
    CI_CNTR_EXPIRED,
    CI_CNTR_DELETED
} ci_cntr_status;

typedef struct ci_container {
    const char *id;              /* "cntr_" + 48 hex digits */
    const char *owner;           /* keyed hash */
    const char *name;
    const char *tool;            /* the CodeInterpreterSandbox it runs on */
    const char *memory_limit;    /* "1g", "4g", ... */
    const char *handle;          /* the provider's reference (opaque), or NULL
                                    before the sandbox exists (lazy creation) */
    apr_time_t created_at;
    apr_time_t last_active_at;
    int idle_seconds;            /* expires_after (minutes on the wire) */
    apr_uint64_t memory_bytes;   /* what its tier may hold on this node (0:
                                    nothing here, e.g. a remote sandbox) */
    ci_cntr_status status;
    apr_time_t held_until;       /* a request in flight holds it (made by it,
                                    or found by it) until then, at the latest:
                                    neither evicted nor expired before */
    const char *node;            /* the node it was created on, in a shared
                                    directory (ci_redis.h); NULL here */
    const char *provider;        /* the provider its tool had when it was made
                                    (a tool declared again with another one
                                    does not run it); NULL in older records */
    const char *cred;            /* a digest of the credentials its remote
                                    sandbox is deleted with (ci_registry.h),
                                    or NULL */
    const char *allowlist;       /* its network policy's domains, comma
                                    separated; NULL: no network */
    const char *secrets;         /* its domain secrets, sealed for it with
                                    the server's secret (never in clear
                                    here), or NULL */
    const char *skills;          /* its skills, as ci_sandbox_def.skills
                                    (JSON text), or NULL */
} ci_container;

typedef struct ci_directory ci_directory;

typedef struct ci_directory_limits {
    int max_containers;          /* live (running) containers on the node */
    int max_per_owner;           /* live containers of one owner */
    apr_interval_time_t retention;  /* how long expired/deleted records and
                                       remembered items stay answerable */
    apr_size_t max_items_bytes;  /* remembered items, all owners, in bytes */
    apr_uint64_t memory_budget;  /* memory_bytes of running containers, all
                                    owners (0: no budget) */
    apr_interval_time_t grace;   /* a container used within this long is
                                    never evicted to admit another */
    int reserve;                 /* of max_containers, the last RESERVE are
                                    for owners that hold fewer than RESERVE:
                                    one owner cannot fill the node alone */
} ci_directory_limits;

/* A directory; its memory is its own (created under P, destroyed with it). */
ci_directory *ci_directory_create(apr_pool_t *p, const ci_directory_limits *limits);

typedef enum {
    CI_DIR_OK = 0,
    CI_DIR_NOT_FOUND,            /* unknown, long gone, or another owner's */
    CI_DIR_EXPIRED,              /* the caller's, expired (or deleted) */
    CI_DIR_OWNER_FULL,           /* the owner's cap, and none of its own idle */
    CI_DIR_NODE_FULL,            /* the node's cap, and none of the owner's idle */
    CI_DIR_NO_OWNER,             /* an empty owner keeps nothing */
    CI_DIR_BUDGET_FULL           /* the memory budget, and evicting the
                                    owner's own least recently used idle one
                                    would not make room */
} ci_dir_status;

/* The limits from now on (the host passes the configuration in force). */
void ci_directory_set_limits(ci_directory *d, const ci_directory_limits *limits);

/* Whether C is busy: an execution runs in it or waits for its sandbox. The
 * host knows (the supervisor, from its sandboxes); the directory asks it
 * only where it matters - eviction, expiry, a drop if idle - so that no
 * marks are kept up to date on every question. Without a probe nothing is
 * busy. */
typedef int (*ci_directory_busy_fn)(void *baton, const ci_container *c);
void ci_directory_set_busy_probe(ci_directory *d, ci_directory_busy_fn fn, void *baton);
int ci_directory_busy(const ci_directory *d, const ci_container *c);

/* A new running container of OWNER, with the id ID (NULL: a fresh one; an
 * id already in the directory is refused as NOT_FOUND), its tier holding
 * MEMORY_BYTES here. At a cap or the memory budget, the owner's own least
 * recently used container that is idle - not busy, not held, unused for
 * the limits' grace - is expired to make room (never another owner's, never
 * an active one): its record goes to *EVICTED (NULL when none) so that the
 * host destroys its sandbox. The record is the directory's; copy what you
 * keep. The node's cap counts its reserve: an owner that holds as many as
 * the reserve cannot take the last RESERVE places. */
ci_dir_status ci_directory_create_container(ci_directory *d, const char *owner,
                                            const char *id, const char *name, const char *tool,
                                            const char *memory_limit,
                                            apr_uint64_t memory_bytes, int idle_seconds,
                                            apr_time_t now, ci_container **out,
                                            ci_container **evicted);

/* The container ID of OWNER: OK (running), EXPIRED, or NOT_FOUND. */
ci_dir_status ci_directory_get(ci_directory *d, const char *id, const char *owner,
                               ci_container **out);

/* The container ID whoever owns it: for the host only (its own sandboxes,
 * its own clock), never for a caller's lookup. NULL when unknown. */
ci_container *ci_directory_find(ci_directory *d, const char *id);
/* ID is in use: as ci_directory_touch. */
void ci_directory_touch_id(ci_directory *d, const char *id, apr_time_t now);

/* Where it was made: PROVIDER and CRED (ci_container), copied. */
void ci_directory_set_origin(ci_directory *d, ci_container *c, const char *provider,
                             const char *cred);

/* Its network policy: the domains of ALLOWLIST and the sealed SECRETS
 * (copied; NULL: none). */
void ci_directory_set_network(ci_directory *d, ci_container *c, const char *allowlist,
                              const char *secrets);

/* Its skills (JSON text, copied; NULL: none). */
void ci_directory_set_skills(ci_directory *d, ci_container *c, const char *skills);

/* Its sandbox now exists (HANDLE, copied) / is gone (NULL). */
void ci_directory_set_handle(ci_directory *d, ci_container *c, const char *handle);

/* A request in flight holds it until UNTIL (at the latest; 0: let go). */
void ci_directory_hold(ci_directory *d, ci_container *c, apr_time_t until);

/* It was used: last_active_at = NOW, which moves its expiry. */
void ci_directory_touch(ci_directory *d, ci_container *c, apr_time_t now);

/* It expired where its sandbox lives (a provider's lifetime cap). */
void ci_directory_expire_now(ci_directory *d, ci_container *c, apr_time_t now);

/* It runs again (after expiry), idle IDLE_SECONDS from NOW: a shadow of a
 * shared directory's container, made running again when that container is
 * used again (ci_directory_ops's adopt). */
void ci_directory_revive(ci_directory *d, ci_container *c, int idle_seconds,
                         apr_time_t now);

/* Delete it (the host destroys the sandbox first). */
void ci_directory_delete(ci_directory *d, ci_container *c, apr_time_t now);

/* Expire every running container idle past its expiry at NOW; returns them
 * (ci_container *) for the host to destroy their sandboxes, and forgets the
 * records and items whose retention has run out. Memory of the array from
 * P. A busy or held container is not expired while it is. */
apr_array_header_t *ci_directory_expire(ci_directory *d, apr_time_t now, apr_pool_t *p);

/* Containers with a remote sandbox (a handle) that ci_directory_expire
 * expired and nobody has ended yet: at most LIMIT of them, each handed out
 * once, for a process that can reach the provider to end (memory of the
 * array from P; the records stay the directory's). */
apr_array_header_t *ci_directory_claim_ends(ci_directory *d, int limit, apr_pool_t *p);

/* The ids of the running containers (const char *, from P). */
apr_array_header_t *ci_directory_running_ids(const ci_directory *d, apr_pool_t *p);

/* When the next container expires (0: none running). */
apr_time_t ci_directory_next_expiry(const ci_directory *d);

/* OWNER's containers, newest first (or oldest: ASCENDING), after the one
 * AFTER (NULL: from the start), at most LIMIT, only those named NAME when
 * NAME is not NULL. *HAS_MORE says whether more follow. Expired ones are
 * listed too, with their status; deleted ones are not. */
apr_array_header_t *ci_directory_list(ci_directory *d, const char *owner,
                                      const char *after, int limit, int ascending,
                                      const char *name, int *has_more, apr_pool_t *p);

/* Running containers per tool (name -> count, as an int in the hash's
 * memory from P) and *RETAINED expired or deleted records kept. */
apr_hash_t *ci_directory_tally(const ci_directory *d, apr_pool_t *p, int *retained);

/* Live (running) containers: on the node, of OWNER. */
int ci_directory_live(const ci_directory *d);
int ci_directory_live_of(const ci_directory *d, const char *owner);

/* ---- what the module returned ---- */

/* RESPONSE_ID (a response returned to OWNER) used container CONTAINER_ID. */
void ci_directory_map_response(ci_directory *d, const char *response_id,
                               const char *owner, const char *container_id);
/* The container RESPONSE_ID led to, for OWNER; NULL when none. */
const char *ci_directory_response_container(ci_directory *d, const char *response_id,
                                            const char *owner);

/* OWNER's conversation CONVERSATION (the client's id: keyed with OWNER,
 * so that another owner's conversation of the same id is another) last went
 * on in container CONTAINER_ID; kept as long as that container's record,
 * as a response id is. */
void ci_directory_map_conversation(ci_directory *d, const char *owner,
                                   const char *conversation, const char *container_id);
/* The container CONVERSATION of OWNER last used; NULL when none. */
const char *ci_directory_conversation_container(ci_directory *d, const char *owner,
                                                const char *conversation);

/* Remember ITEM (our item ITEM_ID, returned to OWNER, as TEXT: what the
 * upstream needs in its place). Oldest items go first past the byte bound. */
void ci_directory_remember(ci_directory *d, const char *item_id, const char *owner,
                           const char *container_id, const char *text, apr_time_t now);
/* What ITEM_ID stands for, for OWNER; NULL when it was never returned to
 * OWNER or is forgotten. */
const char *ci_directory_recall(ci_directory *d, const char *item_id, const char *owner);
/* Forget ITEM_ID of OWNER (nothing when it is not OWNER's). */
void ci_directory_forget_item(ci_directory *d, const char *item_id, const char *owner);
/* The container ITEM_ID was returned from, for OWNER; NULL as for recall. */
const char *ci_directory_item_container(ci_directory *d, const char *item_id,
                                        const char *owner);

/* Whether ID is one of the items the module returns and remembers: a
 * code_interpreter_call ("ci_..."), a shell_call ("sh_...") or its
 * shell_call_output ("sho_..."). */
int ci_directory_our_item(const char *id);

#endif
