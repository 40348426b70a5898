/*
 * ci_child.h - a child process's start, made safe from the MPM's stop
 * signals.
 *
 * Every MPM handles SIGTERM (prefork also SIGHUP) in a new child by
 * destroying the child's pool and calling exit() from the signal handler.
 * When that signal interrupts the child in malloc() - in its first
 * allocations, in initgroups(), in a module's child_init - the handler's
 * free() and the libraries' exit handlers (libcurl's TLS library frees at
 * exit) work on a heap left half updated: "corrupted double-linked list",
 * and the child aborts. httpd alone rarely shows it; with this module's
 * libraries loaded, a stop that meets a starting child did, about once in
 * twenty graceful-restart-then-stop cycles.
 *
 * So, from the fork that makes an MPM child until its last child_init hook,
 * those signals wait: blocked from the fork (pthread_atfork, in the parent
 * only, once it serves) until the User is taken (drop_privileges, last),
 * then noted by a handler of the module's until child_init ends, and only
 * then handed to the MPM's handlers, at a point where nothing is half done.
 * A process the parent forks for anything else gets its mask back before
 * it runs a program (a child cleanup, as apr_proc_create runs them).
 */
#ifndef CI_CHILD_H
#define CI_CHILD_H

#include <httpd.h>

void ci_child_register_hooks(apr_pool_t *p);

#endif
