/*
 * ci_orphans.c - the slots a dead child left. When a child dies holding a
 * remote sandbox, the parent marks the slot orphaned (no network I/O in the
 * parent); a live child's reaper thread deletes the sandbox through its
 * provider with the credentials it was created with (ci_reap_creds.c) -
 * after a key rotation too. Its other slots are released.
 */
#include <apr_atomic.h>
#include <apr_thread_cond.h>
#include <apr_thread_mutex.h>
#include <apr_thread_proc.h>
#include <httpd.h>
#include <http_log.h>
#include <mpm_common.h>
#include "ci_registry_internal.h"
#include "ci_module.h"

#define REAP_ATTEMPTS 5

/* Parent: a child exited; the supervisor destroyed its local sandboxes when
 * their connections closed, so its slots are released. No process is
 * killed here. */
static void ci_child_status(server_rec *s, pid_t pid, ap_generation_t gen,
                            int slot, mpm_child_status state)
{
    int i, freed = 0;
    if (!ci_reg || state != MPM_CHILD_EXITED)
        return;
    for (i = 0; i < REG_SLOTS; i++) {
        reg_slot *sl = &ci_reg->slots[i];
        if (sl->state != SLOT_IN_USE || sl->pid != pid)
            continue;
        if (sl->remote_id[0] &&
            apr_atomic_cas32(&sl->state, SLOT_ORPHANED, SLOT_IN_USE) == SLOT_IN_USE)
            apr_atomic_inc32(&ci_reg->orphans);      /* a live child deletes it */
        else
            ci_reg_free_slot(sl);
        freed++;
    }
    if (freed)
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, s,
                     "CI0402: child %ld exited holding %d sandbox slot(s); released",
                     (long)pid, freed);
}

static struct {
    apr_thread_t *thread;
    apr_thread_mutex_t *lock;
    apr_thread_cond_t *wake;
    int stop;
    server_rec *s;
} reaper;

static void slot_reaped(reg_slot *sl)
{
    sl->remote_id[0] = '\0';
    apr_atomic_dec32(&ci_reg->orphans);
    apr_atomic_dec32(&ci_reg->tools[sl->tool < REG_TOOLS ? sl->tool : 0].live);
    apr_atomic_set32(&sl->state, SLOT_FREE);
    apr_atomic_dec32(&ci_reg->live);
}

static void reap_slot(reg_slot *sl)
{
    cred *c = ci_reg_cred_find(sl->cred);
    const ci_provider *prov;
    const char *why = NULL;
    if (!c) {
        /* Made with credentials this child never saw: a newer one will. */
        apr_atomic_set32(&sl->state, SLOT_ORPHANED);
        return;
    }
    if (!(prov = ci_provider_named(c->provider)) || !prov->reap) {
        slot_reaped(sl);              /* nothing here can delete it */
        return;
    }
    if (prov->reap(&c->c, sl->remote_id, &why) == APR_SUCCESS) {
        ap_log_error(APLOG_MARK, APLOG_NOTICE, 0, reaper.s,
                     "CI0403: deleted remote sandbox of container %s left by dead "
                     "child %ld", sl->container, (long)sl->pid);
        slot_reaped(sl);
        return;
    }
    if (++sl->reap_attempts < REAP_ATTEMPTS) {
        ap_log_error(APLOG_MARK, APLOG_WARNING, 0, reaper.s,
                     "CI0405: the remote sandbox of container %s left by dead child "
                     "%ld could not be deleted (%s); trying again", sl->container,
                     (long)sl->pid, why);
        apr_atomic_set32(&sl->state, SLOT_ORPHANED);
        return;
    }
    ap_log_error(APLOG_MARK, APLOG_ERR, 0, reaper.s,
                 "CI0406: gave up deleting the remote sandbox of container %s left "
                 "by dead child %ld after %d attempts (%s); it ends when its "
                 "lifetime runs out", sl->container, (long)sl->pid, REAP_ATTEMPTS, why);
    slot_reaped(sl);
}

static void reap_orphans(void)
{
    int i;
    if (!apr_atomic_read32(&ci_reg->orphans))
        return;
    for (i = 0; i < REG_SLOTS; i++)
        if (apr_atomic_cas32(&ci_reg->slots[i].state, SLOT_REAPING, SLOT_ORPHANED) ==
            SLOT_ORPHANED)
            reap_slot(&ci_reg->slots[i]);
}

static void *APR_THREAD_FUNC reaper_main(apr_thread_t *thd, void *data)
{
    apr_thread_mutex_lock(reaper.lock);
    while (!reaper.stop) {
        apr_thread_mutex_unlock(reaper.lock);
        reap_orphans();
        apr_thread_mutex_lock(reaper.lock);
        if (!reaper.stop)
            apr_thread_cond_timedwait(reaper.wake, reaper.lock, apr_time_from_sec(2));
    }
    apr_thread_mutex_unlock(reaper.lock);
    return NULL;
}

static apr_status_t reaper_stop(void *data)
{
    apr_status_t ignored;
    if (!reaper.thread)
        return APR_SUCCESS;
    apr_thread_mutex_lock(reaper.lock);
    reaper.stop = 1;
    apr_thread_cond_broadcast(reaper.wake);
    apr_thread_mutex_unlock(reaper.lock);
    apr_thread_join(&ignored, reaper.thread);
    reaper.thread = NULL;
    return APR_SUCCESS;
}

/* The registry's generation this child was forked in. */
static apr_uint32_t child_generation;

int ci_registry_superseded(void)
{
    return ci_reg && apr_atomic_read32(&ci_reg->generation) != child_generation;
}

void ci_registry_child_init(apr_pool_t *pchild, server_rec *s)
{
    if (ci_reg)
        child_generation = apr_atomic_read32(&ci_reg->generation);
    if (!ci_reg || !ci_registry_remote_creds())
        return;             /* no remote sandboxes configured, ever */
    reaper.s = s;
    reaper.stop = 0;
    if (apr_thread_mutex_create(&reaper.lock, APR_THREAD_MUTEX_DEFAULT, pchild) ||
        apr_thread_cond_create(&reaper.wake, pchild) ||
        apr_thread_create(&reaper.thread, NULL, reaper_main, NULL, pchild)) {
        ap_log_error(APLOG_MARK, APLOG_ERR, 0, s, "CI0404: the orphaned-sandbox "
                     "reaper could not start in this child");
        return;
    }
    apr_pool_pre_cleanup_register(pchild, NULL, reaper_stop);
}

void ci_reg_orphans_hooks(apr_pool_t *p)
{
    ap_hook_child_status(ci_child_status, NULL, NULL, APR_HOOK_MIDDLE);
}
