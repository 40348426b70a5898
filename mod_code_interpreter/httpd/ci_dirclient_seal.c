/*
 * ci_dirclient_seal.c - what the container directory keeps sealed, opened
 * (ci_dirclient.h). Handles hold a provider's access tokens, and domain
 * secrets their values: the directory keeps both sealed with the server
 * secret (AES-256-GCM, bound to the container's id), opened only in httpd's
 * children.
 */
#include <httpd.h>
#include <http_log.h>
#include "ci_crypto.h"
#include "ci_dirclient.h"
#include "ci_owner.h"
#include "ci_policy.h"
#include "ci_module.h"

const char *ci_dirclient_unseal(request_rec *r, const ci_container *c)
{
    const char *sealed = c->handle;
    /* bound to its container: a handle copied into another record opens
     * nothing there */
    const char *plain = sealed ? ci_unseal_for(r->pool, ci_owner_secret(), sealed, c->id)
                               : NULL;
    if (sealed && !plain)
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0804: a container's handle "
                      "could not be opened with this server's secret");
    return plain;
}

const char *ci_dirclient_seal_secrets(apr_pool_t *p, const char *id,
                                      const apr_array_header_t *secrets)
{
    return ci_seal_for(p, ci_owner_secret(), ci_secrets_with_placeholders(p, secrets), id);
}

const char *ci_dirclient_unseal_secrets(request_rec *r, const ci_container *c)
{
    const char *plain = c->secrets ? ci_unseal_for(r->pool, ci_owner_secret(), c->secrets,
                                                   c->id) : NULL;
    if (c->secrets && !plain)
        ap_log_rerror(APLOG_MARK, APLOG_ERR, 0, r, "CI0809: container %s's domain secrets "
                      "could not be opened with this server's secret: it runs without "
                      "them", c->id);
    return plain;
}
