/*
 * ci_registry_internal.h - what the registry's files share (ci_registry.c:
 * the shared memory, its slots and the cap; ci_tool_table.c: the newest
 * tool table; ci_reap_creds.c: the credentials remote sandboxes are deleted
 * with; ci_orphans.c: the slots a dead child left, and their reaper;
 * ci_status.c: server-status). Not for use outside the registry.
 */
#ifndef CI_REGISTRY_INTERNAL_H
#define CI_REGISTRY_INTERNAL_H

#include <apr_sha1.h>
#include <httpd.h>
#include "ci_registry.h"

/* ---- the shared memory's layout ----------------------------------------- */

#define REG_MAGIC 0x43495247u
#define REG_LAYOUT 6u
#define REG_SLOTS 4096
#define REG_TOOLS 64
#define REG_NEEDS 64

enum { SLOT_FREE = 0, SLOT_CLAIMING = 1, SLOT_IN_USE = 2, SLOT_ORPHANED = 3,
       SLOT_REAPING = 4 };

typedef struct reg_tool {
    char name[64];
    volatile apr_uint32_t live, warm, started, executions, failures, timeouts;
    volatile apr_uint64_t exec_us;
} reg_tool;

typedef struct reg_slot {
    volatile apr_uint32_t state;
    apr_uint32_t tool;
    apr_uint32_t generation;
    pid_t pid;
    apr_time_t created;
    volatile apr_time_t last_used;
    char container[64];
    char remote_id[64];       /* the provider's id of a remote sandbox, or "" */
    apr_uint32_t reap_attempts;  /* failed deletes of it, once orphaned */
    char cred[APR_SHA1_DIGESTSIZE * 2 + 1];   /* digest of api_base + key */
} reg_slot;

/* The sandbox tools of the newest configuration: written by the parent only,
 * two copies and a sequence counter (even: stable), so a reader sees the old
 * table or the new one, never a mix. Digests only, never a credential. */
typedef struct reg_tool_entry {
    char name[64];
    char params[APR_SHA1_DIGESTSIZE * 2 + 1];   /* non-secret parameters */
    char cred[APR_SHA1_DIGESTSIZE * 2 + 1];     /* api_base + key, or "" */
} reg_tool_entry;

typedef struct reg_tool_table {
    apr_uint32_t generation;
    apr_time_t published_at;
    apr_uint32_t n;
    reg_tool_entry e[REG_TOOLS];
} reg_tool_table;

/* Credentials a container still needs: a child that uses (or holds) a
 * container whose record names credentials DIGEST writes here until when
 * the container may live; the parent forgets retired credentials only
 * after that (ci_reap_creds.c). Digests only. */
enum { NEED_FREE = 0, NEED_WRITING = 1, NEED_SET = 2 };

typedef struct reg_cred_need {
    volatile apr_uint32_t state;
    volatile apr_uint32_t until;             /* seconds since the epoch */
    char digest[APR_SHA1_DIGESTSIZE * 2 + 1];
} reg_cred_need;

typedef struct registry {
    apr_uint32_t magic, layout;
    volatile apr_uint32_t generation;
    volatile apr_uint32_t live;
    volatile apr_uint32_t warm;     /* of the live ones: ready, not handed out */
    volatile apr_uint32_t orphans;  /* remote sandboxes of dead children */
    apr_uint32_t max_live;
    volatile apr_uint32_t table_seq;
    /* admissions of containers: requests that waited for room, refusals by
     * the limit reached, containers evicted to admit another */
    volatile apr_uint32_t admit_waits, refused_owner, refused_node, refused_budget,
                          evicted;
    reg_tool_table tables[2];
    reg_tool tools[REG_TOOLS];
    reg_slot slots[REG_SLOTS];
    reg_cred_need needs[REG_NEEDS];
} registry;

/* The segment, in every process after post_config (NULL before, or when it
 * could not be made). */
extern registry *ci_reg;

/* ---- slots (ci_registry.c) ---------------------------------------------- */

/* Give back SL (in use) and its unit of the cap. */
void ci_reg_free_slot(reg_slot *sl);

/* ---- the tool table (ci_tool_table.c) ----------------------------------- */


/* ---- credentials (ci_reap_creds.c) -------------------------------------- */

/* What the parent keeps of one credential a provider deletes sandboxes with. */
typedef struct cred {
    char digest[APR_SHA1_DIGESTSIZE * 2 + 1];
    char provider[32];             /* by name: the module (and its provider
                                      table) is loaded anew at each reload */
    ci_reap_cred c;                /* malloc'd: outlives every pconf */
    apr_uint32_t generation;       /* last generation that configured it */
    int longest_idle;              /* seconds a container of a tool that used
                                      it may stay idle (idle=, max_idle=) */
    apr_time_t keep_until;         /* retired: forgotten after this (0: in use) */
    struct cred *next;
} cred;

/* The SHA-1, in hex, of PROVIDER and C, into OUT (41 bytes). */
void ci_reg_digest_of(const char *provider, const ci_reap_cred *c, char *out);
/* The credential of DIGEST, or NULL when this process does not know it. */
cred *ci_reg_cred_find(const char *digest);

/* ---- the slots a dead child left (ci_orphans.c) ------------------------- */


/* ---- server-status (ci_status.c) ---------------------------------------- */


#endif
