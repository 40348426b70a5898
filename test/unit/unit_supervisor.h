/*
 * unit_supervisor.h - the real sandbox supervisor, forked by a unit test
 * with the test as its "parent" (the one peer it always serves): slots
 * always granted, a listening socket at a path, and the loop.
 */
#ifndef UNIT_SUPERVISOR_H
#define UNIT_SUPERVISOR_H

#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <apr_pools.h>
#include "ci_supervisor.h"

static int unit_next_slot;
static int unit_claim(const char *tool) { (void)tool; return unit_next_slot++; }
static void unit_set_warm(int slot, int warm) { (void)slot; (void)warm; }
static void unit_release(int slot) { (void)slot; }
static const ci_sup_hooks unit_hooks = { unit_claim, unit_set_warm, unit_release };

/* A socket listening at AT, or -1. */
static int unit_listen_at(const char *at)
{
    struct sockaddr_un sa;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, at);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(fd, 16) != 0)
        return -1;
    return fd;
}

/* In the forked child: the supervisor's loop on FD, as the real one runs. */
static void unit_run_supervisor(int fd)
{
    ci_sup_config cfg = { fd, getppid(), getuid(), &unit_hooks, NULL, 0, NULL, -1,
                          0, 0, 0, 0, NULL, NULL, "no cgroup in the unit tests", 0 };
    apr_pool_t *p;
    signal(SIGPIPE, SIG_IGN);        /* as the real one: a kernel may go */
    setsid();
    apr_pool_create(&p, NULL);
    ci_supervisor_run(p, &cfg);
    _exit(0);
}

#endif
