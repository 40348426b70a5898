/*
 * ci_status.c - the code interpreter's part of server-status (mod_status):
 * live and warm sandboxes against the cap, each tool's counters from the
 * registry, the containers as the supervisor counts them, and admissions.
 * It only reads; the counters are kept in ci_registry.c.
 */
#include <apr_atomic.h>
#include <http_protocol.h>
#include <mod_status.h>
#include "ci_json.h"
#include "ci_registry_internal.h"
#include "ci_dirclient.h"
#include "ci_workers.h"

/* Admissions: waits, refusals by limit, evictions (since the registry was
 * made: the server's start). */
static void admission_status(request_rec *r, int flags)
{
    unsigned w = apr_atomic_read32(&ci_reg->admit_waits), o = apr_atomic_read32(&ci_reg->refused_owner),
             n = apr_atomic_read32(&ci_reg->refused_node), b = apr_atomic_read32(&ci_reg->refused_budget),
             e = apr_atomic_read32(&ci_reg->evicted);
    if (flags & AP_STATUS_SHORT)
        ap_rprintf(r, "CodeInterpreterAdmissions: waited=%u refused_owner_cap=%u "
                      "refused_server_cap=%u refused_memory_budget=%u evicted=%u\n",
                   w, o, n, b, e);
    else
        ap_rprintf(r, "<p>Container admissions: %u waited for room; refused at the "
                      "per-caller cap %u, the server's cap %u, the memory budget %u; %u "
                      "idle containers evicted to admit others</p>\n", w, o, n, b, e);
}

/* The containers, as the supervisor (which holds their directory) counts
 * them. */
static void containers_status(request_rec *r, int flags)
{
    const char *text = NULL, *err = NULL, *perr, *cpu, *cgroup;
    json_object *st, *cs, *tools;
    int running, executing, sandboxes, expired;
    if (ci_dirclient_status(r->server, r->pool, &text, &err) != 0 ||
        !(st = ci_json_parse(r->pool, text, strlen(text), &perr)) ||
        !(cs = ci_json_get(st, "containers", json_type_object))) {
        ap_rprintf(r, flags & AP_STATUS_SHORT ? "CodeInterpreterContainers: unknown\n"
                      : "<p>Containers: unknown (the sandbox supervisor did not "
                        "answer)</p>\n");
        return;
    }
    running = json_object_get_int(ci_json_get(cs, "running", json_type_int));
    executing = json_object_get_int(ci_json_get(cs, "executing", json_type_int));
    sandboxes = json_object_get_int(ci_json_get(cs, "local_sandboxes", json_type_int));
    expired = json_object_get_int(ci_json_get(cs, "expired", json_type_int));
    tools = ci_json_get(cs, "by_tool", json_type_object);
    cpu = ci_json_str(st, "cpu");
    cgroup = ci_json_str(st, "cgroup");
    if (flags & AP_STATUS_SHORT)
        ap_rprintf(r, "CodeInterpreterSandboxCPU: %s\nCodeInterpreterSandboxCgroup: %s\n",
                   cpu ? cpu : "unknown", cgroup ? cgroup : "unknown");
    else
        ap_rprintf(r, "<p>Sandboxes' CPU: %s (%s)</p>\n",
                   cpu ? ap_escape_html(r->pool, cpu) : "unknown",
                   cgroup ? ap_escape_html(r->pool, cgroup) : "unknown");
    if (flags & AP_STATUS_SHORT) {
        ap_rprintf(r, "CodeInterpreterContainers: running=%d executing=%d idle=%d "
                      "local_sandboxes=%d expired=%d\n", running, executing,
                   running - executing, sandboxes, expired);
        if (tools) {
            json_object_object_foreach(tools, name, n)
                ap_rprintf(r, "CodeInterpreterContainers-%s: %d\n", name,
                           json_object_get_int(n));
        }
        return;
    }
    ap_rprintf(r, "<p>Containers: %d running (%d executing, %d idle; %d local "
                  "sandboxes), %d expired kept for late references</p>\n<ul>\n",
               running, executing, running - executing, sandboxes, expired);
    if (tools) {
        json_object_object_foreach(tools, tname, tn)
            ap_rprintf(r, "<li>%s: %d</li>\n", ap_escape_html(r->pool, tname),
                       json_object_get_int(tn));
    }
    ap_rputs("</ul>\n", r);
}

static int ci_status(request_rec *r, int flags)
{
    int i;
    if (!ci_reg)
        return OK;
    if (flags & AP_STATUS_SHORT) {
        ap_rprintf(r, "CodeInterpreterLiveSandboxes: %u\n", apr_atomic_read32(&ci_reg->live));
        ap_rprintf(r, "CodeInterpreterWarmSandboxes: %u\n", apr_atomic_read32(&ci_reg->warm));
        ap_rprintf(r, "CodeInterpreterOrphanedSandboxes: %u\n",
                   apr_atomic_read32(&ci_reg->orphans));
        ap_rprintf(r, "CodeInterpreterMaxSandboxes: %u\n", ci_reg->max_live);
        ap_rprintf(r, "CodeInterpreterQueuedInThisChild: %d\n", ci_workers_queued());
    }
    else {
        ap_rputs("<hr /><h2>Code interpreter</h2>\n", r);
        ap_rprintf(r, "<p>Live sandboxes: %u of %u (%u warm); executions queued or "
                      "running in this child: %d</p>\n", apr_atomic_read32(&ci_reg->live),
                   ci_reg->max_live, apr_atomic_read32(&ci_reg->warm), ci_workers_queued());
        ap_rputs("<table border=\"1\"><tr><th>tool</th><th>live</th><th>warm</th>"
                 "<th>started</th>"
                 "<th>executions</th><th>failures</th><th>timeouts</th>"
                 "<th>mean execution ms</th></tr>\n", r);
    }
    for (i = 0; i < REG_TOOLS && ci_reg->tools[i].name[0]; i++) {
        reg_tool *t = &ci_reg->tools[i];
        apr_uint32_t n = apr_atomic_read32(&t->executions);
        double mean = n ? (double)t->exec_us / n / 1000.0 : 0.0;
        if (flags & AP_STATUS_SHORT)
            ap_rprintf(r, "CodeInterpreterTool-%s: live=%u warm=%u started=%u "
                          "executions=%u failures=%u timeouts=%u mean_ms=%.1f\n",
                       t->name, t->live, t->warm, t->started, n, t->failures,
                       t->timeouts, mean);
        else
            ap_rprintf(r, "<tr><td>%s</td><td>%u</td><td>%u</td><td>%u</td><td>%u</td>"
                          "<td>%u</td><td>%u</td><td>%.1f</td></tr>\n",
                       ap_escape_html(r->pool, t->name), t->live, t->warm, t->started,
                       n, t->failures, t->timeouts, mean);
    }
    if (!(flags & AP_STATUS_SHORT))
        ap_rputs("</table>\n", r);
    containers_status(r, flags);
    admission_status(r, flags);
    return OK;
}

void ci_reg_status_hooks(apr_pool_t *p)
{
    APR_OPTIONAL_HOOK(ap, status_hook, ci_status, NULL, NULL, APR_HOOK_MIDDLE);
}
