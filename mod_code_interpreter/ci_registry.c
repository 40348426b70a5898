/*
 * ci_registry.c - live sandboxes and counters in shared memory. The parent
 * creates the segment once (kept in retained data, so old and new children
 * share it across graceful restarts), writes the tool names, and marks the
 * slots of a child that died as released. Children claim and release slots
 * with compare-and-swap; the live count is a CAS-guarded counter, so the cap
 * holds across processes without a lock.
 */
#include <apr_atomic.h>
#include <apr_shm.h>
#include <apr_strings.h>
#include <ap_mpm.h>
#include <http_protocol.h>
#include <mod_status.h>
#include "ci_registry.h"
#include "ci_workers.h"
#include "mod_code_interpreter.h"

#define REG_MAGIC 0x43495247u
#define REG_LAYOUT 1u
#define REG_SLOTS 4096
#define REG_TOOLS 64

enum { SLOT_FREE = 0, SLOT_CLAIMING = 1, SLOT_IN_USE = 2 };

typedef struct reg_tool {
    char name[64];
    volatile apr_uint32_t live, warm, started, executions, failures, timeouts;
    volatile apr_uint64_t exec_us;
} reg_tool;

typedef struct reg_slot {
    volatile apr_uint32_t state;
    apr_uint32_t tool;
    apr_uint32_t generation;
    pid_t pid;
    apr_time_t created;
    char container[64];
} reg_slot;

typedef struct registry {
    apr_uint32_t magic, layout;
    volatile apr_uint32_t generation;
    volatile apr_uint32_t live;
    volatile apr_uint32_t warm;     /* of the live ones: ready, not handed out */
    apr_uint32_t max_live;
    reg_tool tools[REG_TOOLS];
    reg_slot slots[REG_SLOTS];
} registry;

typedef struct retained {
    apr_shm_t *shm;
    registry *reg;
} retained;

static registry *reg;   /* in every process, after post_config */

static reg_tool *tool_named(const char *name)
{
    int i;
    for (i = 0; reg && i < REG_TOOLS && reg->tools[i].name[0]; i++)
        if (!strcmp(reg->tools[i].name, name))
            return &reg->tools[i];
    return NULL;
}

static void publish_tool(const char *name)
{
    int i;
    if (tool_named(name))
        return;
    for (i = 0; i < REG_TOOLS; i++)
        if (!reg->tools[i].name[0]) {
            apr_cpystrn(reg->tools[i].name, name, sizeof(reg->tools[i].name));
            return;
        }
}

static registry *attach(apr_pool_t *pconf, server_rec *s)
{
    retained *keep = ap_retained_data_get("mod_code_interpreter_registry");
    apr_status_t rv;
    if (keep && keep->reg && keep->reg->magic == REG_MAGIC &&
        keep->reg->layout == REG_LAYOUT)
        return keep->reg;
    if (!keep)
        keep = ap_retained_data_create("mod_code_interpreter_registry", sizeof(*keep));
    /* The process pool outlives every generation's pconf. */
    rv = apr_shm_create(&keep->shm, sizeof(registry), NULL, s->process->pool);
    if (rv != APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_CRIT, rv, s,
                     "CI0401: the sandbox registry's shared memory could not be created");
        return NULL;
    }
    keep->reg = apr_shm_baseaddr_get(keep->shm);
    memset(keep->reg, 0, sizeof(registry));
    keep->reg->magic = REG_MAGIC;
    keep->reg->layout = REG_LAYOUT;
    return keep->reg;
}

int ci_registry_post_config(apr_pool_t *pconf, server_rec *s)
{
    ci_server_conf *c = ci_server_config(s);
    apr_hash_index_t *hi;
    if (!(reg = attach(pconf, s)))
        return HTTP_INTERNAL_SERVER_ERROR;
    apr_atomic_inc32(&reg->generation);
    reg->max_live = c->max_sandboxes != CI_UNSET ? c->max_sandboxes
                                                 : CI_DEFAULT_MAX_SANDBOXES;
    publish_tool("local");
    for (hi = apr_hash_first(pconf, c->sandboxes); hi; hi = apr_hash_next(hi))
        publish_tool(apr_hash_this_key(hi));
    return OK;
}

/* Take one unit of the server-wide budget, or fail at the cap. */
static int take_budget(void)
{
    for (;;) {
        apr_uint32_t live = apr_atomic_read32(&reg->live);
        if (live >= reg->max_live)
            return -1;
        if (apr_atomic_cas32(&reg->live, live + 1, live) == live)
            return 0;
    }
}

int ci_registry_claim(const char *tool, const char *container_id)
{
    reg_tool *t;
    int i;
    if (!reg)
        return REG_SLOTS;   /* no registry: no cap (never happens once started) */
    if (take_budget())
        return -1;
    for (i = 0; i < REG_SLOTS; i++) {
        reg_slot *sl = &reg->slots[i];
        if (apr_atomic_cas32(&sl->state, SLOT_CLAIMING, SLOT_FREE) != SLOT_FREE)
            continue;
        t = tool_named(tool);
        sl->tool = t ? (apr_uint32_t)(t - reg->tools) : 0;
        sl->generation = apr_atomic_read32(&reg->generation);
        sl->pid = getpid();
        sl->created = apr_time_now();
        apr_cpystrn(sl->container, container_id, sizeof(sl->container));
        apr_atomic_set32(&sl->state, SLOT_IN_USE);
        if (t) {
            apr_atomic_inc32(&t->live);
            apr_atomic_inc32(&t->started);
        }
        return i;
    }
    apr_atomic_dec32(&reg->live);
    return -1;
}

static void free_slot(reg_slot *sl)
{
    reg_tool *t = &reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (apr_atomic_cas32(&sl->state, SLOT_FREE, SLOT_IN_USE) != SLOT_IN_USE)
        return;
    apr_atomic_dec32(&t->live);
    apr_atomic_dec32(&reg->live);
}

void ci_registry_set_warm(int slot, int warm)
{
    reg_slot *sl;
    reg_tool *t;
    if (!reg || slot < 0 || slot >= REG_SLOTS)
        return;
    sl = &reg->slots[slot];
    t = &reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (warm) {
        apr_atomic_inc32(&t->warm);
        apr_atomic_inc32(&reg->warm);
    }
    else {
        apr_atomic_dec32(&t->warm);
        apr_atomic_dec32(&reg->warm);
    }
}

void ci_registry_release(int slot)
{
    if (reg && slot >= 0 && slot < REG_SLOTS)
        free_slot(&reg->slots[slot]);
}

void ci_registry_execution(const char *tool, int failed, int timed_out,
                           apr_interval_time_t duration)
{
    reg_tool *t = tool_named(tool);
    if (!t)
        return;
    apr_atomic_inc32(&t->executions);
    if (failed)
        apr_atomic_inc32(&t->failures);
    if (timed_out)
        apr_atomic_inc32(&t->timeouts);
    __atomic_add_fetch(&t->exec_us, (apr_uint64_t)duration, __ATOMIC_RELAXED);
}

/* Parent: a child exited; its local sandboxes died with it (they are tied
 * to its spawner thread), so its slots are released. No process is killed. */
static void ci_child_status(server_rec *s, pid_t pid, ap_generation_t gen,
                            int slot, mpm_child_status state)
{
    int i, freed = 0;
    if (!reg || state != MPM_CHILD_EXITED)
        return;
    for (i = 0; i < REG_SLOTS; i++)
        if (reg->slots[i].state == SLOT_IN_USE && reg->slots[i].pid == pid) {
            free_slot(&reg->slots[i]);
            freed++;
        }
    if (freed)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     "CI0402: child %ld exited holding %d sandbox slot(s); released",
                     (long)pid, freed);
}

/* ---- server-status ------------------------------------------------------ */

static int ci_status(request_rec *r, int flags)
{
    int i;
    if (!reg)
        return OK;
    if (flags & AP_STATUS_SHORT) {
        ap_rprintf(r, "CodeInterpreterLiveSandboxes: %u\n", apr_atomic_read32(&reg->live));
        ap_rprintf(r, "CodeInterpreterWarmSandboxes: %u\n", apr_atomic_read32(&reg->warm));
        ap_rprintf(r, "CodeInterpreterMaxSandboxes: %u\n", reg->max_live);
    }
    else {
        ap_rputs("<hr /><h2>Code interpreter</h2>\n", r);
        ap_rprintf(r, "<p>Live sandboxes: %u of %u (%u warm); executions queued or "
                      "running in this child: %d</p>\n", apr_atomic_read32(&reg->live),
                   reg->max_live, apr_atomic_read32(&reg->warm), ci_workers_queued());
        ap_rputs("<table border=\"1\"><tr><th>tool</th><th>live</th><th>started</th>"
                 "<th>executions</th><th>failures</th><th>timeouts</th>"
                 "<th>mean execution ms</th></tr>\n", r);
    }
    for (i = 0; i < REG_TOOLS && reg->tools[i].name[0]; i++) {
        reg_tool *t = &reg->tools[i];
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
    return OK;
}

void ci_registry_register_hooks(apr_pool_t *p)
{
    ap_hook_child_status(ci_child_status, NULL, NULL, APR_HOOK_MIDDLE);
    APR_OPTIONAL_HOOK(ap, status_hook, ci_status, NULL, NULL, APR_HOOK_MIDDLE);
}
