/*
 * ci_dirclient_end.c - the sandboxes the container directory no longer
 * keeps, ended (ci_dirclient_end): a remote one at its provider, with the
 * credentials it was made with, from any node; a local one by this node's
 * supervisor. Below the client; calls only ci_dirclient_local.c of it.
 */
#include <string.h>
#include <httpd.h>
#include <http_log.h>
#include "ci_crypto.h"
#include "ci_dirclient.h"
#include "ci_owner.h"
#include "ci_registry.h"
#include "ci_settings.h"
#include "ci_module.h"

/* The credentials to end container C's remote sandbox with: those it was
 * made with, while this process knows them (ci_registry), else those of its
 * tool as declared now, on the same provider. */
static int reap_cred_for(server_rec *s, const ci_container *c,
                         const ci_provider **prov, ci_reap_cred *cred)
{
    const ci_sandbox_def *def;
    if (ci_registry_cred_of(c->cred, prov, cred))
        return 1;
    def = c->tool ? ci_sandbox_lookup(s, c->tool) : NULL;
    if (!def || (c->provider && strcmp(c->provider, def->provider->name)) ||
        !def->provider->reap_cred)
        return 0;
    *prov = def->provider;
    return def->provider->reap_cred(def, cred);
}

static void end_remote(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    const char *handle = ci_unseal_for(p, ci_owner_secret(), c->handle, c->id), *err = NULL;
    const ci_provider *prov = NULL;
    ci_reap_cred cred;
    if (!handle) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0834: the handle of container %s "
                     "could not be opened with this server's secret", c->id);
        return;
    }
    if (!reap_cred_for(s, c, &prov, &cred) || !prov->reap_handle) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0839: no credentials known here can "
                     "end the sandbox of container %s (tool %s): it ends at its "
                     "provider's own timeout", c->id, c->tool ? c->tool : "?");
        return;
    }
    if (prov->reap_handle(&cred, handle, &err) != APR_SUCCESS)
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0813: the sandbox of container "
                     "%s could not be deleted: %s", c->id, err ? err : "unknown reason");
    else
        ap_log_error(APLOG_MARK, APLOG_INFO, 0, s, "CI0840: the sandbox of container %s "
                     "was deleted at its provider", c->id);
}

/* A remote sandbox is ended at its provider from any node; a local one by
 * this node's supervisor when it runs here. Else: a local sandbox the
 * supervisor ends itself (one node), or another node's, ended by that
 * node's claim or its shadow's expiry; or a container that never had a
 * sandbox. */
static void end_one(server_rec *s, apr_pool_t *p, const ci_container *c)
{
    if (c->handle)
        end_remote(s, p, c);
    else if (c->node && !strcmp(c->node, ci_dirclient_node()))
        ci_dirclient_drop_local(s, p, c->id, 0);
}

void ci_dirclient_end(server_rec *s, apr_pool_t *p, const apr_array_header_t *gone)
{
    int i;
    for (i = 0; gone && i < gone->nelts; i++)
        end_one(s, p, &APR_ARRAY_IDX(gone, i, ci_container));
}
