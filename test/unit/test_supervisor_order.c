/*
 * test_supervisor_order.c - the supervisor answers the directory's lookups
 * in causal order across connections. A request sends its last question
 * ("finish": which container its response used) without waiting for the
 * answer, and the next turn may ask ("response", "recall") on another
 * connection before the supervisor has read that "finish". The supervisor
 * (forked here, with this process as its "parent") is stopped while both
 * questions are sent, so that both wait in its sockets at once; continued,
 * it reads them in one round of its loop, the newer connection first. A
 * lookup that misses must first hear out what the other connections
 * already sent.
 *
 * Deterministic: the supervisor is known to be stopped (the kernel says so)
 * before either question is sent; nothing waits on a clock.
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

#include "ci_json.h"
#include "ci_supervisor.h"
#include "ci_supervisor_client.h"
#include "ci_supervisor_wire.h"
#include "unit_supervisor.h"

#define OWNER "own_order"
#define CNTR "cntr_0123456789abcdef0123456789abcdef0123456789abcdef"
#define RESP "resp_order_1"
#define ITEM "ci_order_1"
#define ITEM_TEXT "the call's remembered text"

/* One supervisor per test, and the test's two connections to it: A
 * (older) and B (newer, so dispatched first in a round). */
typedef struct fixture {
    apr_pool_t *p;
    pid_t supervisor;
    char dir[32];
    char path[64];
    int a, b;
    ci_sup_reader *ra, *rb;
    int more[2];                 /* C and D, newer still, when a test makes them */
} fixture;

/* ---- the supervisor, forked here ----------------------------------------- */


static int setup(void **state)
{
    fixture *f = calloc(1, sizeof(*f));
    int fd;
    if (!f)
        return -1;
    *state = f;
    f->supervisor = -1;
    f->a = f->b = -1;
    apr_pool_create(&f->p, NULL);
    strcpy(f->dir, "/tmp/ci-order-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path, sizeof(f->path), "%s/sup.sock", f->dir);
    if ((fd = unit_listen_at(f->path)) < 0)
        return -1;
    if ((f->supervisor = fork()) == 0)
        unit_run_supervisor(fd);
    close(fd);
    ci_supervisor_set_path(f->path);
    return f->supervisor > 0 ? 0 : -1;
}

static int teardown(void **state)
{
    fixture *f = *state;
    if (f->a >= 0)
        close(f->a);
    if (f->b >= 0)
        close(f->b);
    if (f->more[0] > 0)
        close(f->more[0]);
    if (f->more[1] > 0)
        close(f->more[1]);
    if (f->supervisor > 0) {
        kill(f->supervisor, SIGKILL);           /* stopped or not */
        waitpid(f->supervisor, NULL, 0);
    }
    unlink(f->path);
    rmdir(f->dir);
    apr_pool_destroy(f->p);
    free(f);
    return 0;
}

/* ---- helpers ------------------------------------------------------------- */

/* A, then B: each accepted (HELLO answered) before the next is made, so B
 * is the newer connection in the supervisor's list. */
static void connect_both(fixture *f)
{
    const char *err = NULL;
    f->a = ci_supervisor_connect(f->p, &err);
    assert_true(f->a >= 0);
    f->b = ci_supervisor_connect(f->p, &err);
    assert_true(f->b >= 0);
    f->ra = ci_sup_reader_create(f->p);
    f->rb = ci_sup_reader_create(f->p);
}

/* Send the directory question REQ on FD; its answer is read later. */
static void ask(int fd, const char *req)
{
    assert_int_equal(ci_sup_send(fd, CI_SUP_DIR, 0, req, strlen(req)), 0);
}

/* The next answer on FD, parsed; the text in *TEXT for messages. */
static json_object *answer(fixture *f, int fd, ci_sup_reader *r, const char **text)
{
    ci_sup_frame fr;
    const char *err = NULL;
    json_object *o;
    assert_int_equal(ci_supervisor_read_frame(fd, r, apr_time_now() + CI_SUP_ANSWER_WAIT,
                                              &fr), 1);
    assert_int_equal(fr.type, CI_SUP_DIR_ANSWER);
    *text = apr_pstrmemdup(f->p, fr.data, fr.len);
    o = ci_json_parse(f->p, fr.data, fr.len, &err);
    if (!o)
        fail_msg("the answer is not JSON (%s): %s", err, *text);
    return o;
}

/* ANS's member KEY is the string WANT; the whole answer shown if not,
 * with the asserting line. */
static void expect_at(int line, json_object *ans, const char *text, const char *key,
                      const char *want)
{
    const char *got = ci_json_str(ans, key);
    if (!got || strcmp(got, want))
        fail_msg("line %d: \"%s\" is %s%s%s, not \"%s\", in the answer %s", line, key,
                 got ? "\"" : "", got ? got : "absent", got ? "\"" : "", want, text);
}
#define expect(ans, text, key, want) expect_at(__LINE__, ans, text, key, want)

/* Ask REQ on FD and read its answer: a question asked and answered alone. */
static json_object *ask_and_wait(fixture *f, int fd, ci_sup_reader *r, const char *req,
                                 const char **text)
{
    ask(fd, req);
    return answer(f, fd, r, text);
}

static void create_container(fixture *f)
{
    const char *text;
    json_object *o = ask_and_wait(f, f->a, f->ra,
                                  "{\"op\":\"create\",\"owner\":\"" OWNER "\",\"id\":\""
                                  CNTR "\",\"name\":\"order\",\"tool\":\"local\","
                                  "\"idle\":600}", &text);
    expect(o, text, "status", "ok");
    expect(ci_json_get(o, "container", json_type_object), text, "id", CNTR);
}

/* The supervisor's state letter in /proc/<pid>/stat (after "(comm) "). */
static char proc_state(pid_t pid)
{
    char name[64], buf[512], *close_paren;
    FILE *fp;
    size_t n;
    snprintf(name, sizeof(name), "/proc/%ld/stat", (long)pid);
    if (!(fp = fopen(name, "r")))
        return '?';
    n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    close_paren = strrchr(buf, ')');
    return close_paren && close_paren[1] == ' ' ? close_paren[2] : '?';
}

/* Stop the supervisor and know it stopped: the kernel's own report of the
 * stop (waitpid, WUNTRACED: blocks until it happened), then the state the
 * kernel shows for it, 'T'. Whatever is sent from now on waits in its
 * sockets until SIGCONT. */
static void stop_supervisor(fixture *f)
{
    int st = 0;
    assert_int_equal(kill(f->supervisor, SIGSTOP), 0);
    assert_int_equal(waitpid(f->supervisor, &st, WUNTRACED), f->supervisor);
    assert_true(WIFSTOPPED(st));
    assert_int_equal(proc_state(f->supervisor), 'T');
}

static void continue_supervisor(fixture *f)
{
    assert_int_equal(proc_state(f->supervisor), 'T');  /* still: both sent meanwhile */
    assert_int_equal(kill(f->supervisor, SIGCONT), 0);
}

/* ---- tests --------------------------------------------------------------- */

/* The race: the container made; the supervisor stopped; A's unanswered
 * FINISH, then B's LOOKUP; the supervisor continued. B's answer (A's is
 * read too, and must be ok), its text in *TEXT. */
static json_object *lookup_after_finish(fixture *f, const char *finish, const char *lookup,
                                        const char **text)
{
    const char *a_text;
    json_object *o, *a;
    connect_both(f);
    create_container(f);
    stop_supervisor(f);
    ask(f->a, finish);
    ask(f->b, lookup);
    continue_supervisor(f);
    o = answer(f, f->b, f->rb, text);
    a = answer(f, f->a, f->ra, &a_text);
    expect(a, a_text, "status", "ok");
    return o;
}

/* A "response" lookup on a newer connection, sent after an unanswered
 * "finish" on an older one and read by the supervisor in the same round,
 * finds the container the finish recorded (not not_found). */
static void test_response_sees_an_earlier_finish_on_another_connection(void **state)
{
    const char *text;
    json_object *o = lookup_after_finish(
        *state, "{\"op\":\"finish\",\"owner\":\"" OWNER "\",\"container_id\":\"" CNTR
                "\",\"response_id\":\"" RESP "\",\"items\":[]}",
        "{\"op\":\"response\",\"owner\":\"" OWNER "\",\"response_id\":\"" RESP
        "\",\"touch\":true}", &text);
    expect(o, text, "status", "ok");
    expect(o, text, "container_id", CNTR);
    expect(o, text, "container_status", "ok");        /* touched: the turn goes on */
}

/* The same for "recall": an item the unanswered finish remembered is
 * recalled, with its text and container, by the newer connection. */
static void test_recall_sees_an_earlier_finish_on_another_connection(void **state)
{
    const char *text;
    json_object *o = lookup_after_finish(
        *state, "{\"op\":\"finish\",\"owner\":\"" OWNER "\",\"container_id\":\"" CNTR
                "\",\"response_id\":\"" RESP "\",\"items\":[{\"id\":\"" ITEM
                "\",\"text\":\"" ITEM_TEXT "\"}]}",
        "{\"op\":\"recall\",\"owner\":\"" OWNER "\",\"item_id\":\"" ITEM "\"}", &text);
    expect(o, text, "status", "ok");
    expect(o, text, "text", ITEM_TEXT);
    expect(o, text, "container_id", CNTR);
}

#define FINISH(resp) "{\"op\":\"finish\",\"owner\":\"" OWNER "\",\"container_id\":\"" \
    CNTR "\",\"response_id\":\"" resp "\",\"items\":[]}"
#define LOOKUP(resp) "{\"op\":\"response\",\"owner\":\"" OWNER "\",\"response_id\":\"" \
    resp "\",\"touch\":true}"

/* Two races at once, one met while the supervisor reads for the other. In
 * the order the supervisor meets them (the newest connection first): D
 * asks for response 1, whose finish waits on A; reading the others for
 * it, it meets C's lookup of response 2 before B's finish of it. C's
 * lookup reads on in turn (all but D and C), and both are found. */
static void test_a_lookup_met_while_another_missed_reads_on(void **state)
{
    fixture *f = *state;
    const char *err = NULL, *text;
    ci_sup_reader *rc, *rd;
    json_object *o;
    connect_both(f);
    assert_true((f->more[0] = ci_supervisor_connect(f->p, &err)) >= 0);     /* C */
    assert_true((f->more[1] = ci_supervisor_connect(f->p, &err)) >= 0);     /* D */
    rc = ci_sup_reader_create(f->p);
    rd = ci_sup_reader_create(f->p);
    create_container(f);
    stop_supervisor(f);
    ask(f->a, FINISH("resp_one"));
    ask(f->b, FINISH("resp_two"));
    ask(f->more[0], LOOKUP("resp_two"));
    ask(f->more[1], LOOKUP("resp_one"));
    continue_supervisor(f);
    o = answer(f, f->more[1], rd, &text);
    expect(o, text, "status", "ok");
    expect(o, text, "container_id", CNTR);
    o = answer(f, f->more[0], rc, &text);
    expect(o, text, "status", "ok");
    expect(o, text, "container_id", CNTR);
    o = answer(f, f->a, f->ra, &text);
    expect(o, text, "status", "ok");
    o = answer(f, f->b, f->rb, &text);
    expect(o, text, "status", "ok");
}

/* Lookups that miss for real still answer not_found, and at once, while
 * the other connection has sent nothing: hearing out the others does not
 * wait on an idle one, and takes nothing from it (A is answered after). */
static void test_a_real_miss_answers_not_found_with_the_other_idle(void **state)
{
    fixture *f = *state;
    const char *text;
    json_object *o;
    connect_both(f);
    create_container(f);
    o = ask_and_wait(f, f->b, f->rb, "{\"op\":\"response\",\"owner\":\"" OWNER
                                     "\",\"response_id\":\"resp_never\",\"touch\":true}",
                     &text);
    expect(o, text, "status", "not_found");
    assert_null(ci_json_str(o, "container_id"));
    o = ask_and_wait(f, f->b, f->rb, "{\"op\":\"recall\",\"owner\":\"" OWNER
                                     "\",\"item_id\":\"ci_never\"}", &text);
    expect(o, text, "status", "not_found");
    assert_null(ci_json_str(o, "text"));
    o = ask_and_wait(f, f->a, f->ra, "{\"op\":\"get\",\"owner\":\"" OWNER "\",\"id\":\""
                                     CNTR "\"}", &text);
    expect(o, text, "status", "ok");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(
            test_response_sees_an_earlier_finish_on_another_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_recall_sees_an_earlier_finish_on_another_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_lookup_met_while_another_missed_reads_on, setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_real_miss_answers_not_found_with_the_other_idle, setup, teardown),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("supervisor_order", tests, NULL, NULL);
    apr_terminate();
    return rc;
}
