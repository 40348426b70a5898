/*
 * ci_dirclient_local.c - what the container directory's client and its back
 * ends share about this node's local sandboxes (ci_dirclient.h): the
 * node's name, an answer's status, the shadow requests to its supervisor,
 * a local sandbox ended. Below the client and the Redis back end; calls neither.
 */
#include <string.h>
#include <apr_strings.h>
#include <httpd.h>
#include <http_log.h>
#include <ap_listen.h>
#include "ci_dirclient.h"
#include "ci_module.h"
#include "ci_directory_ops.h"
#include "ci_json.h"

static const char *node_name = "";

const char *ci_dirclient_node(void)
{
    return node_name;
}

/* "ServerName:port" of the first listener. */
static const char *name_of_node(apr_pool_t *p, server_rec *s)
{
    apr_port_t port = ap_listeners && ap_listeners->bind_addr
                    ? ap_listeners->bind_addr->port : s->port;
    return apr_psprintf(p, "%s:%u", s->server_hostname ? s->server_hostname : "localhost",
                        (unsigned)port);
}

void ci_dirclient_set_node(apr_pool_t *pchild, server_rec *s)
{
    node_name = name_of_node(pchild, s);
}

ci_dir_status ci_dirclient_status_of(json_object *ans)
{
    return ci_dirops_status_of(ci_json_str(ans, "status"));
}

/* ---- sandboxes the directory no longer keeps -------------------------------- */

json_object *ci_dirclient_shadow_request(apr_pool_t *p, const char *op, const char *id)
{
    json_object *req = ci_json_own(p, json_object_new_object());
    json_object_object_add(req, "op", json_object_new_string(op));
    if (id)
        json_object_object_add(req, "id", json_object_new_string(id));
    return req;
}

void ci_dirclient_drop_local(server_rec *s, apr_pool_t *p, const char *id, int if_idle)
{
    const char *err = NULL;
    json_object *req = ci_dirclient_shadow_request(p, "drop", id);
    if (if_idle)
        json_object_object_add(req, "if_idle", json_object_new_boolean(1));
    if (!ci_dirclient_ask_supervisor(p, req, &err) && !strstr(err ? err : "", "not_found"))
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, s, "CI0836: the local sandbox of "
                     "container %s could not be ended: %s", id, err ? err : "");
}
