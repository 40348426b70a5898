/*
 * ci_supervisor_cgroup.c - in the supervisor: a cgroup v2 of its own for
 * each start of a sandbox, under the directory httpd's parent delegated
 * (cfg->cgroup_dir): its CPU weight beside the other sandboxes, its CPU
 * ceiling, its process count and its memory, held by the kernel whatever
 * the sandbox's code does; and, when the sandbox ends, every process in it
 * killed however it was started.
 */
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <apr_strings.h>
#include "ci_log.h"
#include "ci_supervisor_internal.h"

/* A sandbox's weight beside the others (the kernel's default). */
#define SANDBOX_CPU_WEIGHT 100
#define CPU_PERIOD_US 100000
/* Beyond processes=: bubblewrap's own two processes and the egress relay. */
#define PIDS_OVERHEAD 4

/* Whether sandboxes get cgroups (cfg->cgroup_dir). */
static int sup_cgroups_on(void)
{
    return sup_state.cfg->cgroup_dir != NULL;
}

int sup_cgroups_hold_cpu(void)
{
    return sup_cgroups_on() && ci_cgroup_has(sup_state.cfg->cgroup_enabled, "cpu");
}

static void limits_for(const box *b, ci_cgroup_limits *lim)
{
    memset(lim, 0, sizeof(*lim));
    ci_local_cgroup_limits(b->def, lim);
    if (lim->pids)
        lim->pids += PIDS_OVERHEAD;
    lim->cpu_weight = SANDBOX_CPU_WEIGHT;
    lim->cpu_quota_us = sup_state.cfg->cgroup_cpu_quota_us;
    lim->cpu_period_us = CPU_PERIOD_US;
}

int sup_cgroup_open(box *b)
{
    const ci_sup_config *cfg = sup_state.cfg;
    ci_cgroup_limits lim;
    apr_status_t rv;
    char err[128];
    int fd;
    if (!sup_cgroups_on())
        return -1;
    if (b->cgroup)
        sup_cgroup_end(b);
    limits_for(b, &lim);
    /* the supervisor's pid in the name: a leftover of an earlier one that
     * is still exiting never stands in the way */
    b->cgroup = apr_psprintf(b->pool, CI_CGROUP_SANDBOX_PREFIX "%ld-%u", (long)getpid(),
                             ++sup_state.cgroup_seq);
    rv = ci_cgroup_make(b->pool, cfg->cgroup_dir, b->cgroup, cfg->cgroup_enabled, &lim, &fd);
    if (rv != APR_SUCCESS) {
        ci_log(CI_LOG_ERR, "CI0672: sandbox %u: its cgroup %s/%s could not be made (%s): "
               "not started", b->id, cfg->cgroup_dir, b->cgroup,
               apr_strerror(rv, err, sizeof(err)));
        b->cgroup = NULL;
        return -2;
    }
    return fd;
}

void sup_cgroup_end(box *b)
{
    apr_pool_t *p;
    if (!b->cgroup)
        return;
    apr_pool_create(&p, sup_state.p);
    if (ci_cgroup_end(p, sup_state.cfg->cgroup_dir, b->cgroup) != APR_SUCCESS)
        sup_state.cgroup_sweep_due = 1;
    apr_pool_destroy(p);
    b->cgroup = NULL;
}

/* Whether NAME is the cgroup of a sandbox that runs. */
static int in_use(void *baton, const char *name)
{
    const box *b;
    (void)baton;
    for (b = sup_state.boxes; b; b = b->next)
        if (b->cgroup && !strcmp(b->cgroup, name))
            return 1;
    return 0;
}

void sup_cgroup_sweep(void)
{
    apr_pool_t *p;
    int left;
    if (!sup_cgroups_on() || !sup_state.cgroup_sweep_due)
        return;
    apr_pool_create(&p, sup_state.p);
    left = ci_cgroup_sweep(p, sup_state.cfg->cgroup_dir, CI_CGROUP_SANDBOX_PREFIX,
                           in_use, NULL);
    apr_pool_destroy(p);
    sup_state.cgroup_sweep_due = left > 0;
}

const char *sup_cgroup_text(apr_pool_t *p)
{
    const ci_sup_config *cfg = sup_state.cfg;
    const char *cpu_max;
    if (!sup_cgroups_on())
        return apr_psprintf(p, "no cgroup per sandbox: %s",
                            cfg->cgroup_why ? cfg->cgroup_why : "off");
    cpu_max = cfg->cgroup_cpu_quota_us
        ? apr_psprintf(p, ", cpu.max %.2f CPU",
                       (double)cfg->cgroup_cpu_quota_us / CPU_PERIOD_US)
        : "";
    if (!*cfg->cgroup_enabled)
        return apr_psprintf(p, "a cgroup per sandbox under %s, killed whole when it "
                            "ends; no controller is enabled there, so no bound is "
                            "held by it", cfg->cgroup_dir);
    return apr_psprintf(p, "a cgroup per sandbox under %s with %s (cpu.weight %d%s, "
                        "pids.max processes= + %d, memory.max its tier), killed "
                        "whole when it ends", cfg->cgroup_dir, cfg->cgroup_enabled,
                        SANDBOX_CPU_WEIGHT, cpu_max, PIDS_OVERHEAD);
}
