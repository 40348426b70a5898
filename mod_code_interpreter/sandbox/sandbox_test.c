/*
 * sandbox_test.c - a provider for the C unit tests only (built into
 * test/unit/test_sandbox, never into the module, which adds it with
 * ci_provider_add as a module adds one with ap_register_provider). It shows
 * what a provider is: one file, its own keys behind def->conf. Its
 * "interpreter" understands a few words:
 *   "print TEXT"  prints TEXT          "raise"  raises (outcome error)
 *   "die"         the interpreter dies "block"  waits until interrupted
 * Its sandboxes are "remote": each has an id, and reap deletes one by id.
 */
#include <string.h>
#include <apr_strings.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include "ci_sandbox.h"
#include "sandbox_test.h"

struct ci_sandbox {
    const char *id;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int interrupted;
};

ci_test_provider_log ci_test_provider_record;

/* Its own keys. */
typedef struct test_conf {
    const char *api_base;
    const char *api_key;
} test_conf;

static void test_defaults(apr_pool_t *p, ci_sandbox_def *d)
{
    test_conf *c = apr_pcalloc(p, sizeof(*c));
    c->api_key = "secret-of-the-test";
    c->api_base = "test://reaper";
    d->conf = c;
}

static void *test_conf_copy(apr_pool_t *p, const void *conf)
{
    return apr_pmemdup(p, conf, sizeof(test_conf));
}

static const char *test_parse_key(apr_pool_t *p, ci_sandbox_def *d, const char *key,
                                  const char *v, int *known)
{
    *known = !strcmp(key, "api_base");
    if (*known)
        ((test_conf *)d->conf)->api_base = v;
    return NULL;
}

static const char *test_fingerprint(apr_pool_t *p, const ci_sandbox_def *d)
{
    return apr_pstrdup(p, ((const test_conf *)d->conf)->api_base);
}

const char *ci_test_provider_api_base(const ci_sandbox_def *d)
{
    return ((const test_conf *)d->conf)->api_base;
}

static apr_status_t test_start(apr_pool_t *p, const ci_sandbox_def *d, const char *tag,
                               ci_sandbox **out, const char **err)
{
    ci_sandbox *sb = apr_pcalloc(p, sizeof(*sb));
    if (!strcmp(tag, "refuse")) {
        *err = "the test provider refuses tag 'refuse'";
        return APR_EGENERAL;
    }
    sb->id = apr_psprintf(p, "test-%d", ++ci_test_provider_record.started);
    apr_thread_mutex_create(&sb->lock, APR_THREAD_MUTEX_DEFAULT, p);
    apr_thread_cond_create(&sb->wake, p);
    *out = sb;
    return APR_SUCCESS;
}

static void result(apr_pool_t *p, ci_exec_result *res, ci_exec_outcome outcome,
                   const char *text, const char *failure)
{
    memset(res, 0, sizeof(*res));
    res->outcome = outcome;
    res->text = apr_pstrdup(p, text);
    res->text_len = strlen(text);
    res->failure = failure;
    res->images = apr_array_make(p, 1, sizeof(const char *));
}

/* Wait until interrupt() is called. */
static void block(ci_sandbox *sb)
{
    apr_thread_mutex_lock(sb->lock);
    ci_test_provider_record.blocked++;
    while (!sb->interrupted)
        apr_thread_cond_wait(sb->wake, sb->lock);
    apr_thread_mutex_unlock(sb->lock);
}

static apr_status_t test_run(ci_sandbox *sb, apr_pool_t *p, const char *code,
                             ci_exec_result *res)
{
    ci_test_provider_record.runs++;
    if (!strncmp(code, "print ", 6))
        result(p, res, CI_EXEC_COMPLETED, apr_pstrcat(p, code + 6, "\n", NULL), NULL);
    else if (!strcmp(code, "raise"))
        result(p, res, CI_EXEC_ERROR, "Traceback: ValueError\n", NULL);
    else if (!strcmp(code, "die"))
        result(p, res, CI_EXEC_LOST, "", "The interpreter died.");
    else if (!strcmp(code, "block")) {
        block(sb);
        result(p, res, CI_EXEC_INTERRUPTED, "",
               "The execution was stopped because the request ended.");
    }
    else
        result(p, res, CI_EXEC_COMPLETED, "", NULL);
    return APR_SUCCESS;
}

static void test_interrupt(ci_sandbox *sb)
{
    apr_thread_mutex_lock(sb->lock);
    sb->interrupted = 1;
    apr_thread_cond_broadcast(sb->wake);
    apr_thread_mutex_unlock(sb->lock);
}

static void test_destroy(ci_sandbox *sb)
{
    ci_test_provider_record.destroyed++;
}

static const char *test_remote_id(ci_sandbox *sb)
{
    return sb->id;
}

static int test_reap_cred(const ci_sandbox_def *d, ci_reap_cred *out)
{
    const test_conf *c = d->conf;
    out->locator = c->api_base;
    out->secret = c->api_key;
    return 1;
}

static apr_status_t test_reap(const ci_reap_cred *cred, const char *id, const char **err)
{
    if (strcmp(cred->secret, "secret-of-the-test") != 0) {
        *err = "wrong credentials";
        return APR_EACCES;
    }
    apr_cpystrn(ci_test_provider_record.last_reaped, id,
                sizeof(ci_test_provider_record.last_reaped));
    ci_test_provider_record.reaped++;
    return APR_SUCCESS;
}

const ci_provider ci_provider_test = {
    .name = "test",
    .caps = CI_CAP_REMOTE,
    .keys = "api_base",
    .defaults = test_defaults,
    .conf_copy = test_conf_copy,
    .fingerprint = test_fingerprint,
    .parse_key = test_parse_key,
    .start = test_start,
    .run = test_run,
    .interrupt = test_interrupt,
    .destroy = test_destroy,
    .remote_id = test_remote_id,
    .reap_cred = test_reap_cred,
    .reap = test_reap,
};
