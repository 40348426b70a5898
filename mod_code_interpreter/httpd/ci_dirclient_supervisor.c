/*
 * ci_dirclient_supervisor.c - the "supervisor" back end of the container
 * directory's client (ci_dirclient.h): one node's directory, kept by the
 * node's sandbox supervisor and asked over its socket. The supervisor ends
 * the local sandboxes an operation lets go itself; those with a remote
 * sandbox (a container evicted or deleted) are named in the answer's
 * "gone", for the caller to end.
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_dirclient.h"
#include "ci_json.h"
#include "ci_registry.h"
#include "ci_supervisor_client.h"

/* The supervisor's ANSWER parsed: NULL with *ERR when it is not an object. */
static json_object *parsed(apr_pool_t *p, const char *answer, const char **err)
{
    const char *perr = NULL;
    json_object *ans;
    if (!(ans = ci_json_parse(p, answer, strlen(answer), &perr)) ||
        !json_object_is_type(ans, json_type_object)) {
        *err = "a malformed answer";
        return NULL;
    }
    return ans;
}

/* A text asked of the supervisor, parsed: the answer or NULL with *ERR. */
static json_object *ask_text(apr_pool_t *p, json_object *req, const char **err)
{
    apr_size_t len;
    const char *text = ci_json_text(req, &len), *answer = NULL;
    return ci_supervisor_dir(p, text, len, &answer, err) == 0 ? parsed(p, answer, err)
                                                              : NULL;
}

json_object *ci_dirclient_supervisor_answer(apr_pool_t *p, json_object *req,
                                            const char **err)
{
    return ask_text(p, req, err);
}

json_object *ci_dirclient_ask_supervisor(apr_pool_t *p, json_object *req,
                                         const char **err)
{
    json_object *ans = ask_text(p, req, err);
    const char *status = ans ? ci_json_str(ans, "status") : NULL;
    if (ans && (!status || strcmp(status, "ok"))) {
        *err = apr_psprintf(p, "it answered %s", ci_json_text(ans, NULL));
        return NULL;
    }
    return ans;
}

static json_object *supervisor_ask(server_rec *s, apr_pool_t *p, json_object *req,
                                   const char **err)
{
    return ask_text(p, req, err);
}

/* The supervisor's one thread handles a lookup that missed only after
 * what its other connections hold (sup_handle_dir): a question sent
 * before the client saw its answer is never overtaken. */
static int supervisor_send(apr_pool_t *p, ci_dir_sent *q, const char **err)
{
    q->text = ci_json_text(q->req, &q->len);
    return ci_supervisor_dir_send(p, q->text, q->len, err);
}

static json_object *supervisor_receive(apr_pool_t *p, ci_dir_sent *q, const char **err)
{
    const char *answer = NULL;
    return ci_supervisor_dir_receive(p, q->text, q->len, &answer, err) == 0
        ? parsed(p, answer, err) : NULL;
}

/* Due containers are claimed from this node's supervisor when one may have
 * a remote sandbox (its clock expires them, a child ends them at their
 * provider): when credentials for one are known here. */
static int supervisor_claims(server_rec *s)
{
    return ci_registry_remote_creds();
}

const ci_dirclient_backend ci_dirclient_supervisor = {
    .name = "supervisor",
    .ask = supervisor_ask,
    .claims = supervisor_claims,
    .status = ci_supervisor_status,
    .adopt = NULL,
    .reconcile = NULL,
    .marks_busy = 0,
    .shared = 0,
    .send = supervisor_send,
    .receive = supervisor_receive,
};
