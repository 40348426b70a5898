/*
 * local_conf.h - the local provider's own keys of a sandbox tool
 * (ci_sandbox_def's conf), for the files of the local provider: the
 * provider, its supervisor, and the supervisor's protocol that carries a
 * definition whole.
 */
#ifndef CI_LOCAL_CONF_H
#define CI_LOCAL_CONF_H

#include <apr.h>
#include "ci_sandbox.h"

typedef struct ci_local_conf {
    const char *python;            /* the interpreter (an absolute path) */
    apr_uint64_t memory;           /* address space per process */
    int processes;                 /* tasks inside the sandbox */
    apr_uint64_t disk;             /* size of /mnt/data and of any one file */
    const char *preload;           /* comma-separated modules a warm sandbox imports */
} ci_local_conf;

/* DEF's local keys (DEF is a tool of the local provider). */
#define CI_LOCAL(def) ((ci_local_conf *)(def)->conf)

/* The provider (sandbox_local.c). */
extern const ci_provider ci_provider_local;

/* A local tool's keys, with their defaults (from P). */
ci_local_conf *ci_local_conf_create(apr_pool_t *p);

#endif
