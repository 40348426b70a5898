/*
 * test_cgroup.c - ci_cgroup: the parsing of /proc's files, and, on the
 * host's own cgroup v2 (root needed), a service cgroup split, a directory
 * delegated, a sandbox's cgroup made, joined by a forked child before it
 * execs, and ended with the child killed; leftovers swept.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <setjmp.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>
#include <cmocka.h>
#include <apr_general.h>
#include <apr_strings.h>
#include "ci_cgroup.h"

static apr_pool_t *pool;

#define TEST(f) cmocka_unit_test(f)

static const char MOUNTINFO[] =
    "24 30 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "30 1 254:1 / / rw,relatime shared:1 - ext4 /dev/vda1 rw\n"
    "35 24 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro\n"
    "40 35 0:37 / /sys/fs/cgroup/unified rw,relatime shared:10 - cgroup2 cgroup2 rw\n";

static void test_the_mount_is_found(void **state)
{
    (void)state;
    assert_string_equal(ci_cgroup_mount_of(pool, MOUNTINFO), "/sys/fs/cgroup/unified");
    assert_null(ci_cgroup_mount_of(pool, "30 1 254:1 / / rw - ext4 /dev/vda1 rw\n"));
    assert_null(ci_cgroup_mount_of(pool, ""));
    assert_null(ci_cgroup_mount_of(pool, NULL));
}

static void test_the_v2_path_is_the_0_line(void **state)
{
    (void)state;
    assert_string_equal(ci_cgroup_path_of(pool, "12:pids:/x\n0::/system.slice/apache2."
                                                "service\n"),
                        "/system.slice/apache2.service");
    assert_string_equal(ci_cgroup_path_of(pool, "0::/"), "/");
    assert_null(ci_cgroup_path_of(pool, "1:cpu:/\n2:memory:/a\n"));
}

static void test_a_word_is_a_whole_word(void **state)
{
    (void)state;
    assert_true(ci_cgroup_has("cpuset cpu io memory pids\n", "cpu"));
    assert_true(ci_cgroup_has("cpu", "cpu"));
    assert_true(ci_cgroup_has("io pids\n", "pids"));
    assert_false(ci_cgroup_has("cpuset io memory\n", "cpu"));
    assert_false(ci_cgroup_has("hugetlb\n", "memory"));
    assert_false(ci_cgroup_has("", "cpu"));
    assert_false(ci_cgroup_has(NULL, "cpu"));
}

/* ---- on the host's cgroup v2 ------------------------------------------------------- */

static const char *mount_point;
static char top[256];

static char *read_file(const char *dir, const char *name)
{
    char path[512], *buf = apr_pcalloc(pool, 65536);
    int fd;
    ssize_t n;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    if ((fd = open(path, O_RDONLY)) < 0)
        return NULL;
    n = read(fd, buf, 65535);
    close(fd);
    buf[n > 0 ? n : 0] = '\0';
    return buf;
}

static void write_file(const char *dir, const char *name, const char *text)
{
    char path[512];
    int fd;
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    assert_true((fd = open(path, O_WRONLY)) >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* A child that waits to be killed. */
static pid_t sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        for (;;)
            pause();
    }
    assert_true(pid > 0);
    return pid;
}

static int killed(pid_t pid)
{
    int status;
    return waitpid(pid, &status, 0) == pid && WIFSIGNALED(status) &&
           WTERMSIG(status) == SIGKILL;
}

/* Whether this host gives the test a cgroup v2 of its own; under CI a
 * missing one fails rather than skips. */
static int host_cgroup(void)
{
    char *mountinfo = read_file("/proc/self", "mountinfo");
    mount_point = mountinfo ? ci_cgroup_mount_of(pool, mountinfo) : NULL;
    if (geteuid() == 0 && mount_point) {
        snprintf(top, sizeof(top), "%s/ci-unit-%ld", mount_point, (long)getpid());
        return 1;
    }
    fprintf(stderr, "no cgroup v2 to write here (root: %d, mount: %s): skipped\n",
            geteuid() == 0, mount_point ? mount_point : "none");
    if (getenv("CI") && !strcmp(getenv("CI"), "true"))
        fail_msg("CI=true and no cgroup v2 to write here");
    return 0;
}

/* Every cgroup below DIR and DIR itself removed (each empty by then). */
static void remove_tree(const char *dir)
{
    static const char *const subs[] = { "httpd", "sandboxes/supervisor", "sandboxes",
                                        "supervisor", NULL };
    int i;
    for (i = 0; subs[i]; i++)
        rmdir(apr_pstrcat(pool, dir, "/", subs[i], NULL));
    rmdir(dir);
}

static void test_a_service_cgroup_is_split(void **state)
{
    const char *sandboxes, *why = NULL, *leaf;
    pid_t a, b;
    (void)state;
    if (!host_cgroup())
        return;
    assert_int_equal(mkdir(top, 0755), 0);
    a = sleeper();
    b = sleeper();
    write_file(top, "cgroup.procs", apr_itoa(pool, a));
    write_file(top, "cgroup.procs", apr_itoa(pool, b));
    /* not marked delegated by its manager: refused, nothing moved */
    assert_int_equal(ci_cgroup_split(pool, top, "", &sandboxes, &why), APR_ENOTIMPL);
    assert_string_equal(why, apr_psprintf(pool, "httpd's cgroup %s is not delegated to "
                                                "it (systemd: Delegate= for its unit)", top));
    assert_int_equal(access(apr_pstrcat(pool, top, "/httpd", NULL), F_OK), -1);
    assert_int_equal(setxattr(top, "trusted.delegate", "1", 1, 0), 0);   /* as systemd */
    /* a controller the host does not offer there: refused, nothing moved */
    assert_int_equal(ci_cgroup_split(pool, top, "nosuch", &sandboxes, &why), APR_ENOTIMPL);
    assert_string_equal(why, apr_psprintf(pool, "httpd's cgroup %s has no nosuch "
                                                "controller delegated to it (systemd: "
                                                "Delegate=yes for its unit)", top));
    assert_true(ci_cgroup_has(read_file(top, "cgroup.procs"), apr_itoa(pool, a)));
    /* what it offers: every process moves to the leaf */
    assert_int_equal(ci_cgroup_split(pool, top, "", &sandboxes, &why), APR_SUCCESS);
    leaf = apr_pstrcat(pool, top, "/httpd", NULL);
    assert_string_equal(sandboxes, apr_pstrcat(pool, top, "/sandboxes", NULL));
    assert_string_equal(read_file(top, "cgroup.procs"), "");
    assert_true(ci_cgroup_has(read_file(leaf, "cgroup.procs"), apr_itoa(pool, a)));
    assert_true(ci_cgroup_has(read_file(leaf, "cgroup.procs"), apr_itoa(pool, b)));
    assert_non_null(read_file(sandboxes, "cgroup.procs"));
    /* again (a supervisor started again): nothing to move, the same answer */
    assert_int_equal(ci_cgroup_split(pool, top, "", &sandboxes, &why), APR_SUCCESS);
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    assert_true(killed(a) && killed(b));
    remove_tree(top);
}

static void test_a_directory_is_delegated(void **state)
{
    const char *enabled = NULL, *why = NULL, *sup;
    struct stat st;
    (void)state;
    if (!host_cgroup())
        return;
    assert_int_equal(ci_cgroup_delegate(pool, top, 33, 33, &enabled, &why), APR_SUCCESS);
    sup = apr_pstrcat(pool, top, "/supervisor", NULL);
    /* what the parent offers, enabled for its children */
    assert_string_equal(enabled, ci_cgroup_listed(pool, top, "cgroup.controllers"));
    assert_int_equal(stat(top, &st), 0);
    assert_true(st.st_uid == 33 && st.st_gid == 33);
    assert_int_equal(stat(apr_pstrcat(pool, top, "/cgroup.procs", NULL), &st), 0);
    assert_true(st.st_uid == 33);
    assert_int_equal(stat(apr_pstrcat(pool, top, "/cgroup.subtree_control", NULL), &st), 0);
    assert_true(st.st_uid == 33);
    assert_int_equal(stat(apr_pstrcat(pool, sup, "/cgroup.procs", NULL), &st), 0);
    assert_true(st.st_uid == 33);
    /* a file of the limits stays root's: only the structure is handed over */
    assert_int_equal(stat(apr_pstrcat(pool, top, "/cgroup.max.depth", NULL), &st), 0);
    assert_true(st.st_uid == 0);
    remove_tree(top);
    /* a path on no cgroup file system: refused, nothing made */
    assert_int_equal(ci_cgroup_delegate(pool, "/tmp/ci-unit-not-a-cgroup", 33, 33, &enabled,
                                        &why), APR_EINVAL);
    assert_string_equal(why, "/tmp/ci-unit-not-a-cgroup is not in a cgroup v2 file system");
    assert_int_equal(access("/tmp/ci-unit-not-a-cgroup", F_OK), -1);
}

static void test_a_sandbox_joins_before_exec_and_ends_killed(void **state)
{
    ci_cgroup_limits lim = { 100, 50000, 100000, 68, (apr_uint64_t)1 << 30 };
    const char *enabled = NULL, *why = NULL, *path;
    int fd, status, sync[2];
    pid_t pid;
    char c;
    (void)state;
    if (!host_cgroup())
        return;
    assert_int_equal(ci_cgroup_delegate(pool, top, 0, 0, &enabled, &why), APR_SUCCESS);
    assert_int_equal(ci_cgroup_make(pool, top, "sb-1-1", enabled, &lim, &fd), APR_SUCCESS);
    path = apr_pstrcat(pool, top, "/sb-1-1", NULL);
    if (ci_cgroup_has(enabled, "cpu")) {
        assert_string_equal(read_file(path, "cpu.weight"), "100\n");
        assert_string_equal(read_file(path, "cpu.max"), "50000 100000\n");
    }
    if (ci_cgroup_has(enabled, "pids"))
        assert_string_equal(read_file(path, "pids.max"), "68\n");
    if (ci_cgroup_has(enabled, "memory"))
        assert_string_equal(read_file(path, "memory.max"), "1073741824\n");
    /* the child joins by the descriptor, as ci_spawn_here's does */
    assert_int_equal(pipe(sync), 0);
    pid = fork();
    if (pid == 0) {
        if (write(fd, "0", 1) != 1)
            _exit(3);
        (void)!write(sync[1], "j", 1);
        for (;;)
            pause();
    }
    close(fd);
    assert_int_equal(read(sync[0], &c, 1), 1);
    assert_string_equal(read_file(path, "cgroup.procs"),
                        apr_psprintf(pool, "%ld\n", (long)pid));
    /* the end: killed, and the cgroup gone once it is reaped */
    while (ci_cgroup_end(pool, top, "sb-1-1") == APR_EBUSY)
        if (waitpid(pid, &status, WNOHANG) == pid)
            assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(ci_cgroup_end(pool, top, "sb-1-1"), APR_SUCCESS);   /* gone: done */
    close(sync[0]);
    close(sync[1]);
    waitpid(pid, &status, WNOHANG);
    remove_tree(top);
}

static int keep_two(void *baton, const char *name)
{
    (void)baton;
    return !strcmp(name, "sb-9-2");
}

static void test_a_sweep_ends_what_is_not_kept(void **state)
{
    const char *enabled = NULL, *why = NULL;
    ci_cgroup_limits none = { 0, 0, 0, 0, 0 };
    pid_t pid;
    int fd;
    (void)state;
    if (!host_cgroup())
        return;
    assert_int_equal(ci_cgroup_delegate(pool, top, 0, 0, &enabled, &why), APR_SUCCESS);
    assert_int_equal(ci_cgroup_make(pool, top, "sb-9-1", enabled, &none, &fd), APR_SUCCESS);
    pid = sleeper();
    assert_int_equal(write(fd, apr_itoa(pool, pid), strlen(apr_itoa(pool, pid))),
                     (ssize_t)strlen(apr_itoa(pool, pid)));
    close(fd);
    assert_int_equal(ci_cgroup_make(pool, top, "sb-9-2", enabled, &none, &fd), APR_SUCCESS);
    close(fd);
    /* the one not kept is ended, its process killed; the kept one stays */
    while (ci_cgroup_sweep(pool, top, "sb-", keep_two, NULL) > 0)
        ;
    assert_true(killed(pid));
    assert_int_equal(access(apr_pstrcat(pool, top, "/sb-9-1", NULL), F_OK), -1);
    assert_int_equal(access(apr_pstrcat(pool, top, "/sb-9-2", NULL), F_OK), 0);
    assert_int_equal(ci_cgroup_sweep(pool, top, "sb-", NULL, NULL), 0);
    assert_int_equal(access(apr_pstrcat(pool, top, "/sb-9-2", NULL), F_OK), -1);
    remove_tree(top);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_the_mount_is_found),
        TEST(test_the_v2_path_is_the_0_line),
        TEST(test_a_word_is_a_whole_word),
        TEST(test_a_service_cgroup_is_split),
        TEST(test_a_directory_is_delegated),
        TEST(test_a_sandbox_joins_before_exec_and_ends_killed),
        TEST(test_a_sweep_ends_what_is_not_kept),
    };
    int failed;
    apr_initialize();
    apr_pool_create(&pool, NULL);
    failed = cmocka_run_group_tests_name("ci_cgroup", tests, NULL, NULL);
    apr_terminate();
    return failed;
}
