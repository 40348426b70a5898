/*
 * ci_sandbox.h - sandbox tools and the providers behind them, as the module
 * uses them (the provider's own interface is ci_provider.h, installed).
 *
 * A sandbox tool (CodeInterpreterSandbox NAME provider=... key=value ...) is
 * a ci_sandbox_def; its provider is an entry of the provider table
 * (ci_sandbox.c). Everything that differs between providers - the keys they
 * accept, the start-up probe, start, run, interrupt, destroy, reaping what a
 * dead process left, whether a sandbox can be started ahead of need - is an
 * entry of that table. Code outside sandbox/ calls the entries and never
 * asks which provider it has: a new provider is one new file and one line
 * in the table.
 * */
#ifndef CI_SANDBOX_H
#define CI_SANDBOX_H

#include "ci_provider.h"

/* The provider named NAME, or NULL: through the finder the host installed
 * (the module: httpd's provider registry, ap_lookup_provider), else among
 * the built-in ones and those added with ci_provider_add. */
const ci_provider *ci_provider_named(const char *name);
/* NULL when PROV has every entry its capabilities need (CI_CAP_FILES also
 * needs CI_CAP_CONTAINERS), else what it lacks (from P): a configuration
 * naming it is refused with that message. */
const char *ci_provider_check(apr_pool_t *p, const ci_provider *prov);
/* Every provider's name, for messages ("local or e2b"). */
const char *ci_provider_names(apr_pool_t *p);
/* NAMES (const char *) as a message lists them: "a, b or c". */
const char *ci_provider_list_text(apr_pool_t *p, const apr_array_header_t *names);
/* The finder and the namer of the host (NULL: the built-in ones). */
void ci_provider_set_finder(const ci_provider *(*find)(const char *name),
                            const char *(*names)(apr_pool_t *p));
/* A provider beside the built-in ones (without a host's registry: tests). */
void ci_provider_add(const ci_provider *p);
/* The built-in providers, NULL-terminated (the first is the default). */
extern const ci_provider *const ci_builtin_providers[];

/* The defaults of a sandbox tool NAME of PROVIDER. */
ci_sandbox_def *ci_sandbox_def_defaults(apr_pool_t *p, const char *name,
                                        const ci_provider *provider);

/* Parse "key=value" words (ARGC of them) for sandbox NAME into *OUT. Does not
 * resolve indirect values (see ci_sandbox_def_resolve). NULL or why not. */
const char *ci_sandbox_def_parse(apr_pool_t *p, const char *name, int argc,
                                 const char *const *argv, ci_sandbox_def **out);

/* The default memory tier: what a container gets without memory_limit. */
#define CI_DEFAULT_TIER "1g"

/* DEF as memory tier NAME (*OUT, from P; DEF itself for the default tier
 * when tiers= does not name it). NULL, or why not: the tier is not one the
 * tool offers. */
const char *ci_sandbox_def_tier(apr_pool_t *p, const ci_sandbox_def *def,
                                const char *name, const ci_sandbox_def **out);

/* What a container's sandbox runs with: DEF in memory tier TIER (NULL: as
 * declared), with ALLOWLIST (the domains it may reach, comma separated,
 * normalised; NULL or "": none) and SECRETS (as ci_sandbox_def.secrets;
 * NULL: none). */
const ci_sandbox_def *ci_sandbox_def_container(apr_pool_t *p, const ci_sandbox_def *def,
                                               const char *tier, const char *allowlist,
                                               const char *secrets);

/* DEF with a container's SKILLS (as ci_sandbox_def.skills; NULL or "":
 * none): DEF itself, or a copy in P. */
const ci_sandbox_def *ci_sandbox_def_with_skills(apr_pool_t *p, const ci_sandbox_def *def,
                                                 const char *skills);
/* Whether DEF's ceiling lets a client list DOMAIN (normalised). */
int ci_sandbox_def_domain_allowed(apr_pool_t *p, const ci_sandbox_def *def,
                                  const char *domain);

/* A copy of DEF in P, its strings and its provider's keys too. */
ci_sandbox_def *ci_sandbox_def_copy(apr_pool_t *p, const ci_sandbox_def *def);

/* The provider's resolve entry. NULL or why not (no secret in it). */
const char *ci_sandbox_def_resolve(apr_pool_t *p, ci_sandbox_def *def);

/* A text naming every non-secret parameter of DEF: two defs with the same
 * text behave the same (the registry keeps a digest of it). */
const char *ci_sandbox_def_fingerprint(apr_pool_t *p, const ci_sandbox_def *def);

/* ---- a sandbox that restarts itself --------------------------------------
 * A box holds at most one sandbox of its tool: started on first use,
 * restarted on the next run after a failed outcome, destroyed on demand.
 * EVENT (may be NULL) hears each start and destroy, for logs and counts. */
typedef enum { CI_BOX_STARTED, CI_BOX_DESTROYED } ci_box_event;
typedef void ci_box_listener(void *baton, ci_box_event ev, ci_sandbox *sb,
                             const char *why);
typedef struct ci_box ci_box;

/* Memory from P, which must be used by one thread at a time. */
ci_box *ci_box_create(apr_pool_t *p, const ci_sandbox_def *def, const char *tag,
                      ci_box_listener *listener, void *baton);
/* Hand the box a sandbox started elsewhere (warm), with its own pool. */
void ci_box_adopt(ci_box *b, ci_sandbox *sb, apr_pool_t *sbpool);
/* Run CODE (starting or restarting the sandbox first); RES memory from P.
 * APR_SUCCESS with RES filled; APR_ECONNABORTED when interrupted before it
 * ran; or the start's status with *ERR. */
apr_status_t ci_box_run(ci_box *b, apr_pool_t *p, const char *code,
                        ci_exec_result *res, const char **err);
/* The same for a hosted shell call's ACTION (the provider's run_commands;
 * APR_ENOTIMPL when it has none). */
apr_status_t ci_box_run_commands(ci_box *b, apr_pool_t *p, const ci_shell_action *action,
                                 ci_exec_result *res, const char **err);
/* Make B container CONTAINER_ID's, of DEF (its tool in its memory tier):
 * its sandbox is reached with the provider's attach (HANDLE: from an
 * earlier handle, or NULL), a failed run leaves its recovery to the
 * provider, each run keeps it alive for IDLE_SECONDS, and ci_box_release
 * lets it go. Before the first run. */
void ci_box_set_container(ci_box *b, const ci_sandbox_def *def,
                          const char *container_id, const char *handle, int idle_seconds);
/* Let the container's sandbox go, leaving it running. */
void ci_box_release(ci_box *b);
/* From any thread: stop a run in progress, and any run that starts later. */
void ci_box_interrupt(ci_box *b);
/* Destroy the sandbox, if any (WHY goes to the listener). */
void ci_box_destroy(ci_box *b, const char *why);

#endif
