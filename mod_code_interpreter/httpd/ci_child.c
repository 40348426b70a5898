/*
 * ci_child.c - the MPM's stop signals held while a child starts (ci_child.h).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "ci_child.h"
#include <apr_strings.h>
#include <ap_mpm.h>
#include <http_config.h>
#include <http_core.h>
#include <http_log.h>
#include <mpm_common.h>
#include "ci_module.h"

/* The signals the MPMs end or stop a child with. */
static const int stop_signals[] = {SIGTERM, SIGHUP, AP_SIG_GRACEFUL, AP_SIG_GRACEFUL_STOP};
#define NSIGNALS (sizeof(stop_signals) / sizeof(stop_signals[0]))

static void stop_set(sigset_t *set)
{
    unsigned i;
    sigemptyset(set);
    for (i = 0; i < NSIGNALS; i++)
        sigaddset(set, stop_signals[i]);
}

/* ---- blocked from the fork ------------------------------------------------
 * Set once the parent serves (the end of its real post_config), zero in
 * every other process and while the configuration is read (the fork that
 * detaches the parent is not a child's). */
static pid_t serving_parent;
static int atfork_registered;
/* Per forking thread; the child's copy belongs to its only thread. */
static __thread sigset_t mask_before_fork;
static __thread int blocked_for_fork;   /* still blocked, in a child */

static void before_fork(void)
{
    sigset_t set;
    if (!serving_parent || getpid() != serving_parent)
        return;
    stop_set(&set);
    blocked_for_fork = pthread_sigmask(SIG_BLOCK, &set, &mask_before_fork) == 0;
}

static void restore_mask(void)
{
    if (!blocked_for_fork)
        return;
    blocked_for_fork = 0;
    pthread_sigmask(SIG_SETMASK, &mask_before_fork, NULL);
}

static void in_child_after_fork(void)
{
    serving_parent = 0;      /* (blocked_for_fork stays set: released below) */
}

/* A process the parent forked to run a program (apr_proc_create runs the
 * child cleanups before exec: piped loggers, RewriteMap programs) gets its
 * mask back; a program must not start with SIGTERM blocked. */
static apr_status_t restore_mask_for_exec(void *unused)
{
    restore_mask();
    return APR_SUCCESS;
}

/* ---- noted until child_init ends ----------------------------------------- */
static struct sigaction mpm_action[NSIGNALS];  /* the MPM's handlers, while held */
static int held[NSIGNALS];                     /* this one's handler is ours now */
static volatile sig_atomic_t arrived[NSIGNALS];

static void note_arrival(int sig)
{
    unsigned i;
    for (i = 0; i < NSIGNALS; i++)
        if (stop_signals[i] == sig)
            arrived[i] = 1;
}

/* Whether SA is a handler of the MPM's own (its code lies in the object that
 * holds the MPM's module record): in an MPM child, its handlers; in mod_cgid's
 * daemon, which runs drop_privileges too, the parent's inherited ones, while
 * the daemon's own SIGHUP handler stays its own. */
static int mpm_handler(apr_pool_t *p, const struct sigaction *sa)
{
    module *mpm = ap_find_linked_module(apr_pstrcat(p, ap_show_mpm(), ".c", NULL));
    Dl_info in_handler, in_mpm;
    if ((sa->sa_flags & SA_SIGINFO) || sa->sa_handler == SIG_DFL ||
        sa->sa_handler == SIG_IGN || !mpm)
        return 0;
    return dladdr((void *)sa->sa_handler, &in_handler) && dladdr(mpm, &in_mpm) &&
           in_handler.dli_fbase == in_mpm.dli_fbase;
}

/* drop_privileges, last of all (the User taken, initgroups done): from here
 * to the end of child_init the MPM's stop signals are noted, not handled,
 * and the mask the child was forked with is back. */
static int note_until_child_init(apr_pool_t *p, server_rec *s)
{
    struct sigaction note;
    unsigned i;
    if (!blocked_for_fork)
        return DECLINED;
    memset(&note, 0, sizeof(note));
    note.sa_handler = note_arrival;
    sigfillset(&note.sa_mask);
    for (i = 0; i < NSIGNALS; i++) {
        arrived[i] = 0;
        held[i] = sigaction(stop_signals[i], NULL, &mpm_action[i]) == 0 &&
                  mpm_handler(p, &mpm_action[i]) &&
                  sigaction(stop_signals[i], &note, NULL) == 0;
    }
    restore_mask();
    return DECLINED;
}

/* child_init, last of all: the MPM's handlers back, and what arrived
 * meanwhile raised again; it is handled when this thread's mask lets it (at
 * once, or when the MPM restores the mask it blocked for child_init). */
static void hand_over_stop_signals(apr_pool_t *pchild, server_rec *s)
{
    sigset_t set, old;
    unsigned i;
    int any = 0;
    stop_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    for (i = 0; i < NSIGNALS; i++) {
        if (!held[i])
            continue;
        held[i] = 0;
        sigaction(stop_signals[i], &mpm_action[i], NULL);
        if (arrived[i]) {
            any = 1;
            raise(stop_signals[i]);
        }
    }
    if (any)
        ap_log_error(APLOG_MARK, APLOG_DEBUG, 0, s, "CI0007: a stop signal reached this "
                     "child while it started; handled now that it has");
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

/* ---- in the parent ------------------------------------------------------------ */

static int not_serving_yet(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp)
{
    serving_parent = 0;
    /* glibc removes the handlers when mod_so unloads the module (they are
     * registered with its DSO handle); a loaded copy registers once. */
    if (!atfork_registered)
        atfork_registered = pthread_atfork(before_fork, restore_mask,
                                           in_child_after_fork) == 0;
    return OK;
}

static int serving(apr_pool_t *pconf, apr_pool_t *plog, apr_pool_t *ptemp, server_rec *s)
{
    if (ap_state_query(AP_SQ_MAIN_STATE) == AP_SQ_MS_CREATE_PRE_CONFIG)
        return OK;
    apr_pool_cleanup_register(pconf, NULL, apr_pool_cleanup_null, restore_mask_for_exec);
    serving_parent = getpid();
    return OK;
}

void ci_child_register_hooks(apr_pool_t *p)
{
    ap_hook_pre_config(not_serving_yet, NULL, NULL, APR_HOOK_REALLY_FIRST);
    ap_hook_post_config(serving, NULL, NULL, APR_HOOK_REALLY_LAST);
    ap_hook_drop_privileges(note_until_child_init, NULL, NULL, APR_HOOK_REALLY_LAST);
    ap_hook_child_init(hand_over_stop_signals, NULL, NULL, APR_HOOK_REALLY_LAST);
}
