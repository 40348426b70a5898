/*
 * ci_owner.h - who a request's caller is, as the module stores it: the
 * keyed hash (HMAC with the server secret, ci_crypto.h) of the request's
 * Authorization header, or of CodeInterpreterOwner's expression (e.g.
 * %{REMOTE_USER} behind an authentication module). Computed once, in the
 * module's first fixups hook, only for requests that carry the tool.
 *
 * The server secret is CodeInterpreterSecret file:PATH, or, without it, 32
 * random bytes the parent makes once and keeps across graceful restarts
 * (a full restart makes a new one).
 */
#ifndef CI_OWNER_H
#define CI_OWNER_H

#include <httpd.h>
#include <http_config.h>
#include "ci_crypto.h"

/* CodeInterpreterSecret file:PATH (server config). */
const char *ci_owner_set_secret(cmd_parms *cmd, void *dummy, const char *spec);
/* CodeInterpreterOwner EXPR (directory config; stored in its ci_loc_conf). */
const char *ci_owner_set_expr(cmd_parms *cmd, void *conf, const char *expr);

/* post_config: the secret of this configuration (without
 * CodeInterpreterSecret and with KEPT, a path: the secret made once and
 * kept there, so that owners outlive a full restart). OK or an HTTP status. */
int ci_owner_post_config(apr_pool_t *pconf, server_rec *s, const char *kept);

/* The keyed owner of R, or NULL when it has none (an empty owner: nobody
 * may reuse what it makes). */
const char *ci_owner_of(request_rec *r);

/* In the first fixups hook (before anything may rewrite a header), where
 * the APIs are served: R's owner noted, for its handler to ask
 * (ci_owner_noted: the owner, or "" or NULL for none). */
void ci_owner_note(request_rec *r);
const char *ci_owner_noted(request_rec *r);

/* The server secret (for sealing). */
const ci_secret *ci_owner_secret(void);

#endif
