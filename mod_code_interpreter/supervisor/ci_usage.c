/*
 * ci_usage.c - a local container's /mnt/data measured from outside
 * (ci_usage.h).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "ci_usage.h"

/* The one child of bubblewrap's monitor OUTER: the new pid namespace's
 * init, whose root is the sandbox's (processes inside are its descendants,
 * and orphans are reparented to it, never to OUTER). 0 when none. */
static pid_t namespace_init(pid_t outer)
{
    char path[64], buf[64];
    ssize_t n;
    int fd;
    snprintf(path, sizeof(path), "/proc/%ld/task/%ld/children", (long)outer, (long)outer);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
        return 0;
    n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return (pid_t)strtol(buf, NULL, 10);
}

static void count_entry(int dfd, const char *entry, const char *name, ci_data_usage *out)
{
    struct stat st;
    if (fstatat(dfd, entry, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
        return;
    out->files++;
    out->bytes += (apr_uint64_t)st.st_size;
    if (name && !strcmp(entry, name)) {
        out->has_name = 1;
        out->name_bytes = (apr_uint64_t)st.st_size;
    }
}

int ci_usage_measure(pid_t outer, const char *name, ci_data_usage *out)
{
    char path[80];
    pid_t init = outer > 0 ? namespace_init(outer) : 0;
    struct dirent *e;
    unsigned long seen = 0;
    DIR *d;
    int dfd;
    memset(out, 0, sizeof(*out));
    if (init <= 0)
        return -1;
    snprintf(path, sizeof(path), "/proc/%ld/root/mnt/data", (long)init);
    if ((dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) < 0)
        return -1;
    if (!(d = fdopendir(dfd))) {
        close(dfd);
        return -1;
    }
    while ((e = readdir(d))) {
        if (++seen > CI_USAGE_MAX_ENTRIES) {
            out->truncated = 1;
            break;
        }
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            count_entry(dirfd(d), e->d_name, name, out);
    }
    closedir(d);
    return 0;
}
