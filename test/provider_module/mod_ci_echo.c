/*
 * mod_ci_echo.c - a module built apart from mod_code_interpreter, against
 * its installed headers only, as another project would build one: it adds
 * a sandbox provider "echo" (its "interpreter" prints back the code it is
 * given, after its own key prefix=) and writes one line per execution,
 * from the execution hook, to the file CiEchoExecutionLog names.
 *
 * The tests build it with apxs (test/test_provider_module.py).
 */
#include <string.h>
#include <apr_strings.h>
#include <ap_provider.h>
#include <httpd.h>
#include <http_config.h>
#include <http_log.h>
#include "mod_code_interpreter.h"

module AP_MODULE_DECLARE_DATA ci_echo_module;

static const char *execution_log;

struct ci_sandbox {
    const char *prefix;
};

typedef struct echo_conf {
    const char *prefix;
} echo_conf;

static void echo_defaults(apr_pool_t *p, ci_sandbox_def *d)
{
    echo_conf *c = apr_pcalloc(p, sizeof(*c));
    c->prefix = "";
    d->conf = c;
}

static void *echo_conf_copy(apr_pool_t *p, const void *conf)
{
    return apr_pmemdup(p, conf, sizeof(echo_conf));
}

static const char *echo_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    return apr_pstrcat(p, "prefix=", ((const echo_conf *)d->conf)->prefix, NULL);
}

static const char *echo_parse_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                  const char *v, int *known)
{
    *known = !strcmp(key, "prefix");
    if (*known)
        ((echo_conf *)d->conf)->prefix = v;
    return NULL;
}

static apr_status_t echo_start(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                               ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    sb->prefix = ((const echo_conf *)d->conf)->prefix;
    *out = sb;
    return APR_SUCCESS;
}

static apr_status_t echo_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                             ci_exec_result *res)
{
    memset(res, 0, sizeof(*res));
    res->outcome = CI_EXEC_COMPLETED;
    res->text = apr_pstrcat(p, sb->prefix, code, "\n", NULL);
    res->text_len = strlen(res->text);
    res->images = apr_array_make(p, 1, sizeof(const char *));
    return APR_SUCCESS;
}

static void echo_interrupt(ci_sandbox *sb)
{
}

static void echo_destroy(ci_sandbox *sb)
{
}

/* Built with -DCI_ECHO_CLAIMS_SHELL, it claims the hosted shell without
 * the entry that runs it: the configuration must refuse it. */
#ifdef CI_ECHO_CLAIMS_SHELL
#define ECHO_CAPS CI_CAP_SHELL
#else
#define ECHO_CAPS 0
#endif

static const ci_provider echo_provider = {
    .name = "echo",
    .caps = ECHO_CAPS,
    .keys = "prefix",
    .defaults = echo_defaults,
    .conf_copy = echo_conf_copy,
    .fingerprint = echo_fingerprint,
    .parse_key = echo_parse_key,
    .start = echo_start,
    .run = echo_run,
    .interrupt = echo_interrupt,
    .destroy = echo_destroy,
};

/* One line per execution: tool, provider, kind, call, outcome, text. */
static int note_execution(request_rec *r, const ci_execution *e)
{
    apr_file_t *f;
    const char *line;
    if (!execution_log ||
        apr_file_open(&f, execution_log, APR_FOPEN_WRITE | APR_FOPEN_CREATE |
                      APR_FOPEN_APPEND, APR_FPROT_OS_DEFAULT, r->pool) != APR_SUCCESS)
        return DECLINED;
    line = apr_psprintf(r->pool, "%s\t%s\t%s\t%s\t%s\t%d\t%s\n", e->tool, e->provider,
                        e->kind, e->call_id, e->failed ? "failed" : "completed",
                        (int)e->output_bytes, e->text);
    apr_file_puts(line, f);
    apr_file_close(f);
    return OK;
}

static const char *set_execution_log(cmd_parms *cmd, void *dummy, const char *path)
{
    execution_log = ap_server_root_relative(cmd->pool, path);
    return NULL;
}

static const command_rec echo_directives[] = {
    AP_INIT_TAKE1("CiEchoExecutionLog", set_execution_log, NULL, RSRC_CONF,
                  "a file for one line per execution"),
    {NULL}
};

static void echo_register_hooks(apr_pool_t *p)
{
    ap_register_provider(p, CI_PROVIDER_GROUP, "echo", CI_PROVIDER_VERSION,
                         &echo_provider);
    APR_OPTIONAL_HOOK(ci, execution, note_execution, NULL, NULL, APR_HOOK_MIDDLE);
}

AP_DECLARE_MODULE(ci_echo) = {
    STANDARD20_MODULE_STUFF,
    NULL, NULL, NULL, NULL,
    echo_directives,
    echo_register_hooks
};
