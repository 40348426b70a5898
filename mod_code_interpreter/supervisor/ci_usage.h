/*
 * ci_usage.h - what a local container's /mnt/data holds, measured by the
 * supervisor from outside the sandbox: the count and bytes its upload limits
 * (max_files=, max_bytes=) are checked against. The kernel inside counts
 * too, but it shares its process with the user's code, which can change
 * what it answers; the files themselves cannot lie about their sizes.
 */
#ifndef CI_USAGE_H
#define CI_USAGE_H

#include <sys/types.h>
#include <apr.h>

typedef struct ci_data_usage {
    apr_uint64_t files;        /* regular files directly under /mnt/data */
    apr_uint64_t bytes;        /* their sizes (st_size), summed */
    int has_name;              /* the name asked about is one of them ... */
    apr_uint64_t name_bytes;   /* ... of this size */
    int truncated;             /* more entries than are read: count as full */
} ci_data_usage;

/* Entries of /mnt/data read at most (a directory of more counts as full). */
#define CI_USAGE_MAX_ENTRIES 100000

/* Measure the /mnt/data of the sandbox whose bubblewrap monitor is OUTER
 * (the supervisor's child): through its namespace init's root, never
 * following a symlink, opening no file. NAME: the file an upload replaces.
 * 0, or -1 when it cannot be measured. */
int ci_usage_measure(pid_t outer, const char *name, ci_data_usage *out);

#endif
