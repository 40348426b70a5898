/*
 * ci_registry.c - live sandboxes and counters in shared memory. The parent
 * creates the segment once (kept in retained data, so old and new children
 * share it across graceful restarts) and writes the tool names. Children
 * claim and release slots with compare-and-swap; the live count is a
 * CAS-guarded counter, so the cap holds across processes without a lock.
 * The layout is in ci_registry_internal.h; the tool table, the credentials,
 * a dead child's slots and server-status have files of their own.
 */
#include <apr_atomic.h>
#include <apr_shm.h>
#include <unistd.h>
#include <apr_strings.h>
#include <ap_mpm.h>
#include <http_log.h>
#include "ci_settings.h"
#include "ci_registry_internal.h"
#include "ci_module.h"

typedef struct retained {
    apr_shm_t *shm;
    registry *reg;
} retained;

registry *ci_reg;   /* in every process, after post_config */

static reg_tool *tool_named(const char *name)
{
    int i;
    for (i = 0; ci_reg && i < REG_TOOLS && ci_reg->tools[i].name[0]; i++)
        if (!strcmp(ci_reg->tools[i].name, name))
            return &ci_reg->tools[i];
    return NULL;
}

static void publish_tool(const char *name)
{
    int i;
    if (tool_named(name))
        return;
    for (i = 0; i < REG_TOOLS; i++)
        if (!ci_reg->tools[i].name[0]) {
            apr_cpystrn(ci_reg->tools[i].name, name, sizeof(ci_reg->tools[i].name));
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
    if (!(ci_reg = attach(pconf, s)))
        return HTTP_INTERNAL_SERVER_ERROR;
    server_rec *v;
    apr_atomic_inc32(&ci_reg->generation);
    ci_reg->max_live = (apr_uint32_t)ci_server_max_sandboxes(c);
    publish_tool(CI_DEFAULT_TOOL);
    for (v = s; v; v = v->next) {
        ci_server_conf *vc = ci_server_config(v);
        for (hi = apr_hash_first(pconf, vc->sandboxes); hi; hi = apr_hash_next(hi))
            publish_tool(apr_hash_this_key(hi));
    }
    return OK;
}

/* Take one unit of the server-wide budget, or fail at the cap. */
static int take_budget(void)
{
    for (;;) {
        apr_uint32_t live = apr_atomic_read32(&ci_reg->live);
        if (live >= ci_reg->max_live)
            return -1;
        if (apr_atomic_cas32(&ci_reg->live, live + 1, live) == live)
            return 0;
    }
}

int ci_registry_claim(const char *tool, const char *container_id)
{
    reg_tool *t;
    int i;
    if (!ci_reg)
        return REG_SLOTS;   /* no registry: no cap (never happens once started) */
    if (take_budget())
        return -1;
    for (i = 0; i < REG_SLOTS; i++) {
        reg_slot *sl = &ci_reg->slots[i];
        if (apr_atomic_cas32(&sl->state, SLOT_CLAIMING, SLOT_FREE) != SLOT_FREE)
            continue;
        t = tool_named(tool);
        sl->tool = t ? (apr_uint32_t)(t - ci_reg->tools) : 0;
        sl->generation = apr_atomic_read32(&ci_reg->generation);
        sl->pid = getpid();
        sl->created = sl->last_used = apr_time_now();
        apr_cpystrn(sl->container, container_id, sizeof(sl->container));
        sl->remote_id[0] = '\0';
        sl->reap_attempts = 0;
        sl->cred[0] = '\0';
        apr_atomic_set32(&sl->state, SLOT_IN_USE);
        if (t) {
            apr_atomic_inc32(&t->live);
            apr_atomic_inc32(&t->started);
        }
        return i;
    }
    apr_atomic_dec32(&ci_reg->live);
    return -1;
}

void ci_reg_free_slot(reg_slot *sl)
{
    reg_tool *t = &ci_reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (apr_atomic_cas32(&sl->state, SLOT_FREE, SLOT_IN_USE) != SLOT_IN_USE)
        return;
    apr_atomic_dec32(&t->live);
    apr_atomic_dec32(&ci_reg->live);
}

void ci_registry_set_warm(int slot, int warm)
{
    reg_slot *sl;
    reg_tool *t;
    if (!ci_reg || slot < 0 || slot >= REG_SLOTS)
        return;
    sl = &ci_reg->slots[slot];
    t = &ci_reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0];
    if (warm) {
        apr_atomic_inc32(&t->warm);
        apr_atomic_inc32(&ci_reg->warm);
    }
    else {
        apr_atomic_dec32(&t->warm);
        apr_atomic_dec32(&ci_reg->warm);
    }
}

void ci_registry_release(int slot)
{
    if (ci_reg && slot >= 0 && slot < REG_SLOTS)
        ci_reg_free_slot(&ci_reg->slots[slot]);
}

void ci_registry_touch(int slot)
{
    if (ci_reg && slot >= 0 && slot < REG_SLOTS)
        ci_reg->slots[slot].last_used = apr_time_now();
}

/* ---- counters, for server-status (ci_status.c) -------------------------- */

void ci_registry_execution(const char *tool, ci_exec_outcome outcome,
                           apr_interval_time_t duration)
{
    reg_tool *t = tool_named(tool);
    if (!t)
        return;
    apr_atomic_inc32(&t->executions);
    if (outcome >= CI_EXEC_TIMED_OUT)
        apr_atomic_inc32(&t->failures);
    if (outcome == CI_EXEC_TIMED_OUT)
        apr_atomic_inc32(&t->timeouts);
    __atomic_add_fetch(&t->exec_us, (apr_uint64_t)duration, __ATOMIC_RELAXED);
}

void ci_registry_admission(int waited, ci_dir_status why, int evicted)
{
    if (!ci_reg)
        return;
    if (waited)
        apr_atomic_inc32(&ci_reg->admit_waits);
    if (evicted)
        apr_atomic_inc32(&ci_reg->evicted);
    if (why == CI_DIR_OWNER_FULL)
        apr_atomic_inc32(&ci_reg->refused_owner);
    else if (why == CI_DIR_NODE_FULL)
        apr_atomic_inc32(&ci_reg->refused_node);
    else if (why == CI_DIR_BUDGET_FULL)
        apr_atomic_inc32(&ci_reg->refused_budget);
}
