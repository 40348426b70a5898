/*
 * mod_code_interpreter.h - what another httpd module may use of
 * mod_code_interpreter:
 *
 * - Sandbox providers. A provider is a `ci_provider` (ci_provider.h: its
 *   entries, its caps, its own keys behind ci_sandbox_def's conf),
 *   registered in the module's register_hooks with
 *
 *     ap_register_provider(p, CI_PROVIDER_GROUP, "mine", CI_PROVIDER_VERSION,
 *                          &my_provider);
 *
 *   and named by `CodeInterpreterSandbox NAME provider=mine ...` (its
 *   LoadModule comes before that line). The version changes whenever the
 *   interface does. Its capabilities (CI_CAP_...) say which entries it
 *   has; a configuration naming a provider that lacks one of them is
 *   refused at configtest. Container files are listed as ci_cfile
 *   (ci_cfiles.h, with the functions that make and order them:
 *   ci_cfiles_add, ci_cfiles_sort); what a run returns is a ci_exec_result
 *   (ci_exec.h). These headers are installed beside this one; include this
 *   one. The module exports the functions they declare (CI_DECLARE,
 *   ci_declare.h) and nothing else of its own.
 *
 * - The execution hook: one call per execution (code_interpreter's code, or
 *   a shell's commands), on the request's thread, once it is over: its tool,
 *   container, what ran, how it ended and how long it took. An optional
 *   hook, so a module that uses it does not link against this one:
 *
 *     APR_OPTIONAL_HOOK(ci, execution, my_hook, NULL, NULL, APR_HOOK_MIDDLE);
 *
 *   The module's own audit log (CodeInterpreterAuditLog) is its first user.
 *
 * Nothing here is a secret: an execution carries no key or token, and the
 * owner only as the keyed hash the module stores.
 */
#ifndef MOD_CODE_INTERPRETER_PUBLIC_H
#define MOD_CODE_INTERPRETER_PUBLIC_H

#include <httpd.h>
#include <apr_hooks.h>
#include <apr_optional_hooks.h>
#include "ci_provider.h"

/* ap_register_provider's group and version for sandbox providers. */
#define CI_PROVIDER_GROUP "code_interpreter_sandbox"
#define CI_PROVIDER_VERSION "3"

/* One execution, as the execution hook sees it. */
typedef struct ci_execution {
    const char *tool;            /* the CodeInterpreterSandbox name */
    const char *provider;        /* its provider's name */
    const char *container_id;    /* the container (or the request's own sandbox) */
    const char *owner;           /* the caller's keyed hash, or NULL */
    const char *call_id;         /* the item the client sees ("ci_...", "sh_...") */
    const char *kind;            /* "code" (code_interpreter) or "commands" (shell) */
    const char *text;            /* the code, or the commands, one per line */
    ci_exec_outcome outcome;
    int failed;                  /* the outcome lost or stopped the execution */
    const char *failure;         /* why, or NULL */
    apr_size_t output_bytes;     /* what it printed (before the model's cut) */
    int images;
    apr_time_t started;          /* when it began */
    apr_interval_time_t duration;
    const apr_array_header_t *command_list; /* a shell call's commands
                                               (const char *); NULL for code */
    const apr_array_header_t *commands; /* how they ended: ci_command_result
                                           (ci_exec.h), one per command that
                                           ran; NULL for code */
} ci_execution;

/* Return OK or DECLINED; every registered function is called. */
APR_DECLARE_EXTERNAL_HOOK(ci, CI, int, execution,
                          (request_rec *r, const ci_execution *e))

#endif
