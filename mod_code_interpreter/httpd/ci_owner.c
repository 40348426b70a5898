/* ci_owner.c - the keyed owner of a request, and the server secret. */
#include <string.h>
#include <unistd.h>
#include <ap_expr.h>
#include <apr_file_io.h>
#include <apr_strings.h>
#include <http_log.h>
#include "ci_settings.h"
#include "ci_owner.h"
#include "ci_module.h"

#define RETAINED_SECRET "mod_code_interpreter_secret"

static const ci_secret *secret;     /* this generation's, after post_config */

const char *ci_owner_set_secret(cmd_parms *cmd, void *dummy, const char *spec)
{
    ci_server_conf *c = ci_server_config(cmd->server);
    const char *err = ap_check_cmd_context(cmd, GLOBAL_ONLY), *path;
    ci_secret *s;
    if (err)
        return err;
    if (strncmp(spec, "file:", 5) || !spec[5])
        return apr_psprintf(cmd->pool, "%s: '%s' is not valid: expected file:PATH",
                            cmd->cmd->name, spec);
    path = ap_server_root_relative(cmd->pool, spec + 5);
    if (!path || (err = ci_secret_read(cmd->pool, path, &s)))
        return apr_psprintf(cmd->pool, "%s: %s", cmd->cmd->name,
                            err ? err : "the path is not valid");
    c->secret = s;
    return NULL;
}

const char *ci_owner_set_expr(cmd_parms *cmd, void *conf, const char *expr)
{
    ci_loc_conf *d = conf;
    const char *err = NULL;
    d->owner = ap_expr_parse_cmd(cmd, expr, AP_EXPR_FLAG_STRING_RESULT, &err, NULL);
    if (err)
        return apr_psprintf(cmd->pool, "%s: '%s' is not a valid expression: %s",
                            cmd->cmd->name, expr, err);
    return NULL;
}

/* Without CodeInterpreterSecret: random bytes made once by the parent, kept
 * in its retained memory (never shared memory) across graceful restarts. */
static const ci_secret *kept_secret(apr_pool_t *pconf)
{
    unsigned char *bytes = ap_retained_data_get(RETAINED_SECRET);
    if (!bytes) {
        bytes = ap_retained_data_create(RETAINED_SECRET, CI_SECRET_MIN);
        if (apr_generate_random_bytes(bytes, CI_SECRET_MIN) != APR_SUCCESS)
            return NULL;
    }
    return ci_secret_create(pconf, bytes, CI_SECRET_MIN);
}

/* Without CodeInterpreterSecret, where skills are kept: the secret made
 * once and kept beside them, in PATH (hex, mode 0600, the parent's: root's
 * when httpd starts as root), so that owner hashes, and with them every
 * caller's skills, outlive a full restart. NULL with *ERR. */
static const ci_secret *stored_secret(apr_pool_t *pconf, const char *path,
                                      const char **err)
{
    unsigned char bytes[CI_SECRET_MIN];
    char hex[2 * CI_SECRET_MIN + 2];
    ci_secret *sec = NULL;
    apr_file_t *f;
    apr_size_t n;
    apr_status_t rv;
    if (!(*err = ci_secret_read(pconf, path, &sec)))
        return sec;
    if (access(path, F_OK) == 0)
        return NULL;                     /* there, and not a secret: say so */
    if ((rv = apr_generate_random_bytes(bytes, sizeof(bytes))) != APR_SUCCESS ||
        (rv = apr_file_open(&f, path, APR_FOPEN_WRITE | APR_FOPEN_CREATE | APR_FOPEN_EXCL,
                            APR_FPROT_UREAD | APR_FPROT_UWRITE, pconf)) != APR_SUCCESS) {
        *err = apr_psprintf(pconf, "%s could not be made: %pm", path, &rv);
        return NULL;
    }
    ap_bin2hex(bytes, sizeof(bytes), hex);
    hex[2 * CI_SECRET_MIN] = '\n';
    n = 2 * CI_SECRET_MIN + 1;
    rv = apr_file_write_full(f, hex, n, NULL);
    if (rv == APR_SUCCESS)
        rv = apr_file_sync(f);
    apr_file_close(f);
    if (rv != APR_SUCCESS) {
        apr_file_remove(path, pconf);
        *err = apr_psprintf(pconf, "%s could not be written: %pm", path, &rv);
        return NULL;
    }
    return (*err = ci_secret_read(pconf, path, &sec)) ? NULL : sec;
}

int ci_owner_post_config(apr_pool_t *pconf, server_rec *s, const char *kept)
{
    ci_server_conf *c = ci_server_config(s);
    const char *err = NULL;
    if (!c->secret && kept) {
        if (!(secret = stored_secret(pconf, kept, &err))) {
            ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0703: the server secret kept "
                         "with the skills could not be read or made: %s", err);
            return HTTP_INTERNAL_SERVER_ERROR;
        }
        return OK;
    }
    secret = c->secret ? c->secret : kept_secret(pconf);
    if (!secret) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, 0, s, "CI0701: no server secret could "
                     "be made (the system's random source failed)");
        return HTTP_INTERNAL_SERVER_ERROR;
    }
    return OK;
}

const ci_secret *ci_owner_secret(void)
{
    return secret;
}

#define OWNER_KEY "ci-api-owner"

void ci_owner_note(request_rec *r)
{
    const char *owner = ci_owner_of(r);
    apr_pool_userdata_setn(owner ? owner : "", OWNER_KEY, NULL, r->pool);
}

const char *ci_owner_noted(request_rec *r)
{
    const char *owner = NULL;
    apr_pool_userdata_get((void **)&owner, OWNER_KEY, r->pool);
    return owner;
}

const char *ci_owner_of(request_rec *r)
{
    ci_loc_conf *d = ci_loc_config(r);
    const char *err = NULL, *who;
    if (d->owner) {
        who = ap_expr_str_exec(r, d->owner, &err);
        if (err) {
            ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0702: CodeInterpreterOwner "
                          "could not be evaluated: %s", err);
            return NULL;
        }
    }
    else
        who = apr_table_get(r->headers_in, "Authorization");
    /* An empty owner is no owner: it must not be one shared by everyone
     * who sends none. */
    return who && *who ? ci_owner_key(r->pool, secret, who, strlen(who)) : NULL;
}
