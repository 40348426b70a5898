/*
 * test_local_shell.c - hosted shell calls through the local provider, as an
 * httpd child makes them: the real supervisor (forked here, with this
 * process as its "parent", the one peer it always serves), protocol 5's
 * SHELL, bubblewrap and the kernel inside it. Skipped where bubblewrap
 * cannot start a sandbox.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>

#include "ci_sandbox.h"
#include "local_conf.h"
#include "ci_supervisor.h"
#include "ci_supervisor_client.h"
#include "ci_supervisor_wire.h"
#include "unit_supervisor.h"

static apr_pool_t *pool;
static pid_t supervisor = -1;
static char dir[] = "/tmp/ci-shell-XXXXXX";
static char path[sizeof(dir) + 16];
static int usable;                   /* a sandbox could be started here */

/* ---- the supervisor, forked here ----------------------------------------- */


static ci_sandbox_def *tool(const char *timeout)
{
    const char *argv[] = { "provider=local", timeout, "max_output=4k" };
    ci_sandbox_def *def = NULL;
    assert_null(ci_sandbox_def_parse(pool, "shell", 3, argv, &def));
    return def;
}

/* Whether a sandbox starts here at all (bubblewrap, user namespaces). */
static int sandbox_starts(void)
{
    ci_sandbox *sb = NULL;
    const char *err = NULL;
    if (access("/usr/bin/bwrap", X_OK) != 0 ||
        ci_provider_local.start(pool, tool("timeout=30"), "probe", &sb, &err) != APR_SUCCESS) {
        fprintf(stderr, "no local sandbox here (%s): skipped\n", err ? err : "no bwrap");
        /* Under CI nothing skips silently: a missing prerequisite fails. */
        if (getenv("CI") && !strcmp(getenv("CI"), "true"))
            fail_msg("CI=true and no local sandbox starts: %s", err ? err : "no bwrap");
        return 0;
    }
    ci_provider_local.destroy(sb);
    return 1;
}

static int group_setup(void **state)
{
    int fd;
    apr_pool_create(&pool, NULL);
    if (!mkdtemp(dir))
        return -1;
    snprintf(path, sizeof(path), "%s/sup.sock", dir);
    if ((fd = unit_listen_at(path)) < 0)
        return -1;
    if ((supervisor = fork()) == 0)
        unit_run_supervisor(fd);
    close(fd);
    ci_supervisor_set_path(path);
    usable = supervisor > 0 && sandbox_starts();
    return 0;
}

static int group_teardown(void **state)
{
    if (supervisor > 0) {
        kill(supervisor, SIGKILL);
        waitpid(supervisor, NULL, 0);
    }
    unlink(path);
    rmdir(dir);
    apr_pool_destroy(pool);
    return 0;
}

/* ---- helpers ------------------------------------------------------------- */

static ci_shell_action action(apr_interval_time_t timeout, apr_size_t max_output, ...)
{
    ci_shell_action a;
    apr_array_header_t *list = apr_array_make(pool, 4, sizeof(const char *));
    const char *c;
    va_list ap;
    va_start(ap, max_output);
    while ((c = va_arg(ap, const char *)))
        *(const char **)apr_array_push(list) = c;
    va_end(ap);
    a.commands = list;
    a.timeout = timeout;
    a.max_output = max_output;
    return a;
}

static const ci_command_result *command(const ci_exec_result *r, int i)
{
    return &APR_ARRAY_IDX(r->commands, i, ci_command_result);
}

static void exited(const ci_exec_result *r, int i, const char *out, const char *err,
                   int code)
{
    assert_string_equal(command(r, i)->stdout_text, out);
    assert_string_equal(command(r, i)->stderr_text, err);
    assert_int_equal(command(r, i)->timed_out, 0);
    assert_int_equal(command(r, i)->exit_code, code);
}

static ci_sandbox *start(const char *timeout)
{
    ci_sandbox *sb = NULL;
    const char *err = NULL;
    assert_int_equal(ci_provider_local.start(pool, tool(timeout), "t", &sb, &err),
                     APR_SUCCESS);
    return sb;
}

/* ---- tests --------------------------------------------------------------- */

static void test_commands_run_in_the_sandbox(void **state)
{
    ci_shell_action a = action(apr_time_from_sec(20), 1000,
                               "echo hi; echo err >&2; pwd", "exit 3",
                               "test -x /bin/bash && test -x /usr/bin/python3 && ls /bin/ls",
                               "echo x > f.txt", "printf '\\342\\230\\203%.0s' 1 2 3 4 5 6",
                               NULL);
    ci_exec_result r;
    ci_sandbox *sb;
    if (!usable)
        skip();
    sb = start("timeout=30");
    a.max_output = 4;
    assert_int_equal(ci_provider_local.run_commands(sb, pool, &a, &r), APR_SUCCESS);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_null(r.failure);
    assert_int_equal(r.commands->nelts, 5);
    exited(&r, 0, "hi\n/", "", 0);            /* cut at 4 characters: stdout first */
    exited(&r, 1, "", "", 3);
    exited(&r, 2, "/bin", "", 0);
    exited(&r, 3, "", "", 0);
    exited(&r, 4, "\xe2\x98\x83\xe2\x98\x83\xe2\x98\x83\xe2\x98\x83", "", 0);
    assert_int_equal(r.files->nelts, 1);
    assert_string_equal(APR_ARRAY_IDX(r.files, 0, const char *), "f.txt");

    a = action(apr_time_from_sec(20), 100, "pwd; ls", NULL);
    assert_int_equal(ci_provider_local.run_commands(sb, pool, &a, &r), APR_SUCCESS);
    exited(&r, 0, "/mnt/data\nf.txt\n", "", 0);
    /* the same files for Python, in the same sandbox */
    assert_int_equal(ci_provider_local.run(sb, pool, "open('f.txt').read()", &r),
                     APR_SUCCESS);
    assert_string_equal(r.text, "'x\\n'\n");
    assert_null(r.commands);
    ci_provider_local.destroy(sb);
}

static void test_a_command_past_its_timeout_ends_the_call(void **state)
{
    ci_shell_action a = action(apr_time_from_msec(300), 100,
                               "echo a; sleep 1000", "echo never", NULL);
    ci_exec_result r;
    ci_sandbox *sb;
    if (!usable)
        skip();
    sb = start("timeout=30");
    assert_int_equal(ci_provider_local.run_commands(sb, pool, &a, &r), APR_SUCCESS);
    assert_int_equal(r.outcome, CI_EXEC_COMPLETED);
    assert_int_equal(r.commands->nelts, 1);
    assert_string_equal(command(&r, 0)->stdout_text, "a\n");
    assert_int_equal(command(&r, 0)->timed_out, 1);
    a = action(apr_time_from_sec(20), 100, "echo again", NULL);
    assert_int_equal(ci_provider_local.run_commands(sb, pool, &a, &r), APR_SUCCESS);
    exited(&r, 0, "again\n", "", 0);
    ci_provider_local.destroy(sb);
}

/* The tool's timeout bounds the whole call: a container's kernel is
 * interrupted (SIGINT, which this command ignores), ends the command's
 * group itself, and lives on with its state. */
static void test_the_tools_timeout_interrupts_a_containers_call(void **state)
{
    const char *req = "{\"op\":\"create\",\"owner\":\"o\",\"id\":\"cntr_shell\","
                      "\"tool\":\"shell\",\"idle\":600}";
    ci_shell_action a = action(apr_time_from_sec(600), 100,
                               "trap '' INT; echo a; sleep 1000", "echo never", NULL);
    const char *answer = NULL, *err = NULL;
    ci_sandbox_def *def = tool("timeout=2");
    ci_exec_result r;
    ci_sandbox *sb = NULL;
    if (!usable)
        skip();
    assert_int_equal(ci_supervisor_dir(pool, req, strlen(req), &answer, &err), 0);
    assert_non_null(strstr(answer, "\"status\":\"ok\""));
    assert_int_equal(ci_provider_local.attach(pool, def, "cntr_shell", NULL, 600, &sb, &err),
                     APR_SUCCESS);
    assert_int_equal(ci_provider_local.run(sb, pool, "x = 41", &r), APR_SUCCESS);
    assert_int_equal(ci_provider_local.run_commands(sb, pool, &a, &r), APR_SUCCESS);
    assert_int_equal(r.outcome, CI_EXEC_TIMED_OUT);
    assert_string_equal(r.failure, "The shell call timed out after 2 s and its command "
                                   "was stopped; the container's variables and files "
                                   "are kept.");
    assert_int_equal(r.failure_says_all, 1);
    assert_int_equal(r.commands->nelts, 1);
    assert_string_equal(command(&r, 0)->stdout_text, "a\n");
    assert_int_equal(command(&r, 0)->timed_out, 1);
    assert_int_equal(ci_provider_local.run(sb, pool, "x + 1", &r), APR_SUCCESS);
    assert_string_equal(r.text, "42\n");
    ci_provider_local.release(sb);
}

/* The OUTPUT frames on FD up to END, joined into *OUT: END's outcome. */
static int output_until_end(int fd, ci_sup_reader *rd, const char **out)
{
    ci_sup_frame f;
    *out = "";
    for (;;) {
        assert_int_equal(ci_supervisor_read_frame(fd, rd, apr_time_now() +
                                                  apr_time_from_sec(30), &f), 1);
        if (f.type == CI_SUP_END)
            return f.data[0];
        assert_int_equal(f.type, CI_SUP_OUTPUT);
        *out = apr_pstrcat(pool, *out, f.data, NULL);
    }
}

/* A SHELL frame the supervisor does not understand is answered END
 * (not_run); the sandbox serves the next one. */
static void test_a_malformed_shell_frame_is_not_run(void **state)
{
    const char *bad = "{\"commands\":[],\"timeout_ms\":5,\"max_output\":5}";
    const char *good = "{\"max_output\":50,\"commands\":[\"echo ok\"],\"timeout_ms\":5000}";
    ci_sup_reader *rd = ci_sup_reader_create(pool);
    apr_size_t len;
    const char *payload = ci_sup_create_encode(pool, tool("timeout=30"), "raw", &len);
    const char *err = NULL, *out = NULL;
    ci_sup_frame f;
    apr_uint32_t id;
    int fd;
    if (!usable)
        skip();
    fd = ci_supervisor_open(pool, CI_SUP_CREATE, payload, len, rd, &err);
    assert_true(fd >= 0);
    assert_int_equal(ci_supervisor_read_frame(fd, rd, apr_time_now() + apr_time_from_sec(60),
                                              &f), 1);
    assert_int_equal(f.type, CI_SUP_OK);
    id = f.id;
    assert_int_equal(ci_sup_send(fd, CI_SUP_SHELL, id, bad, strlen(bad)), 0);
    assert_int_equal(ci_supervisor_read_frame(fd, rd, apr_time_now() + apr_time_from_sec(10),
                                              &f), 1);
    assert_int_equal(f.type, CI_SUP_END);
    assert_int_equal(f.len, 1);
    assert_int_equal(f.data[0], CI_EXEC_NOT_RUN);
    assert_int_equal(ci_sup_send(fd, CI_SUP_SHELL, id, good, strlen(good)), 0);
    assert_int_equal(output_until_end(fd, rd, &out), CI_EXEC_COMPLETED);
    assert_string_equal(out, "{\"type\": \"command\", \"stdout\": \"ok\\n\", "
                             "\"stderr\": \"\", \"exit_code\": 0}\n"
                             "{\"type\": \"end_of_execution\"}\n");
    close(fd);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands_run_in_the_sandbox),
        cmocka_unit_test(test_a_command_past_its_timeout_ends_the_call),
        cmocka_unit_test(test_the_tools_timeout_interrupts_a_containers_call),
        cmocka_unit_test(test_a_malformed_shell_frame_is_not_run),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("local_shell", tests, group_setup, group_teardown);
    apr_terminate();
    return rc;
}
