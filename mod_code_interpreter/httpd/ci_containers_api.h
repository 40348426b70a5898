/*
 * ci_containers_api.h - OpenAI's Containers API (POST/GET /containers,
 * GET/DELETE /containers/{id}) served where CodeInterpreterContainers On,
 * for the caller's own containers only.
 */
#ifndef CI_CONTAINERS_API_H
#define CI_CONTAINERS_API_H

#include <httpd.h>

/* The caller of R at a Containers API location, computed by the module's
 * first fixups hook (before anything may rewrite a header): stashed here. */
void ci_containers_api_fixups(request_rec *r);

void ci_containers_api_register_hooks(apr_pool_t *p);

#endif
