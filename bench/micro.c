/*
 * micro.c - the CPU cost of each step of the module's own work for one
 * intercepted request (one code call, then a text answer), outside httpd,
 * on the same bodies the benchmark sends:
 *
 *   micro REQUEST ANSWER1 ANSWER2 [ITERATIONS]
 *
 * REQUEST is the client's body; ANSWER1 the upstream's first answer (a
 * function_call of the code tool), ANSWER2 its answer to the follow-up (a
 * message). Each step is timed in thread CPU time; the medians are printed as
 * one line of JSON per step: {"step": ..., "cpu_us": ..., "wall_us": ...}.
 * MICRO_COLD=1 starts each phase (see evict()) with cold caches.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <json-c/json.h>
#include "ci_exec.h"
#include "ci_json.h"
#include "ci_loop.h"
#include "ci_request.h"
#include "bench_common.h"

enum { S_SCAN, S_REWRITE, S_TAKE1, S_RECORD, S_FOLLOWUP, S_TAKE2, S_ANSWER,
       S_CLEANUP, S_PARSE_ONLY, S_PRINT_ONLY, S_COUNT };
static const char *const names[S_COUNT] = {
    "scan for the tool (ci_body_mentions_tool)",
    "rewrite: parse + convert + serialise round 1 (ci_request_rewrite)",
    "first answer: parse + items (ci_loop_take_round)",
    "record the execution (ci_loop_record)",
    "follow-up body (ci_loop_followup_body)",
    "second answer: parse + items (ci_loop_take_round)",
    "final response: assemble + serialise (ci_loop_response, ci_json_text)",
    "release the request's JSON (pool cleanup)",
    "reference: json-c parse of the request alone",
    "reference: json-c serialise of the parsed request alone",
};

static double *cpu[S_COUNT], *wall[S_COUNT];
static double t_cpu, t_wall;
static char *evict_buf;
static size_t evict_len;

/* With MICRO_COLD=1, each phase that the server runs after other work
 * (reading the request; the first answer, after a network round trip;
 * recording the execution, after the sandbox ran; the second answer) starts
 * with cold caches: write over a buffer larger than the last-level cache
 * first (not timed). Steps within a phase run back to back, as in httpd. */
static void evict(void)
{
    size_t i;
    if (!evict_buf)
        return;
    for (i = 0; i < evict_len; i += 64)
        evict_buf[i] = (char)(evict_buf[i] + 1);
}

static void start(void)
{
    t_cpu = bench_now_us(CLOCK_THREAD_CPUTIME_ID);
    t_wall = bench_now_us(CLOCK_MONOTONIC);
}

static void stop(int step, int i)
{
    cpu[step][i] = bench_now_us(CLOCK_THREAD_CPUTIME_ID) - t_cpu;
    wall[step][i] = bench_now_us(CLOCK_MONOTONIC) - t_wall;
}

static void fail(const char *what, const ci_error *err)
{
    fprintf(stderr, "%s failed: %s\n", what, err && err->message ? err->message : "?");
    exit(1);
}

int main(int argc, char **argv)
{
    apr_size_t len, len1, len2, n;
    const char *body, *a1, *a2;
    apr_pool_t *root, *p;
    int iters, i, s;

    if (argc < 4) {
        fprintf(stderr, "usage: %s REQUEST ANSWER1 ANSWER2 [ITERATIONS]\n", argv[0]);
        return 2;
    }
    body = bench_slurp(argv[1], &len);
    a1 = bench_slurp(argv[2], &len1);
    a2 = bench_slurp(argv[3], &len2);
    iters = argc > 4 ? atoi(argv[4]) : 200;
    if (iters < 1)
        iters = 1;
    for (s = 0; s < S_COUNT; s++) {
        cpu[s] = calloc((size_t)iters, sizeof(double));
        wall[s] = calloc((size_t)iters, sizeof(double));
    }
    if (getenv("MICRO_COLD") && !strcmp(getenv("MICRO_COLD"), "1")) {
        evict_len = (size_t)256 << 20;
        evict_buf = calloc(evict_len, 1);
    }
    apr_initialize();
    apr_pool_create(&root, NULL);

    for (i = 0; i < iters; i++) {
        ci_rewrite_opts opts;
        ci_request *req = NULL;
        ci_error err;
        ci_loop *loop;
        ci_exec_result res;
        const apr_array_header_t *calls;
        json_object *parsed;
        const char *perr;
        int k, found;

        memset(&err, 0, sizeof(err));
        memset(&opts, 0, sizeof(opts));
        opts.function_name = "python";
        apr_pool_create(&p, root);

        evict();
        start();
        found = ci_body_mentions_tool(body, len);
        stop(S_SCAN, i);
        if (!found)
            fail("the scan", NULL);

        start();
        if (ci_request_rewrite(p, body, len, &opts, &req, &err) != CI_REQ_INTERCEPT)
            fail("the rewrite", &err);
        stop(S_REWRITE, i);

        evict();
        start();
        loop = ci_loop_create(p, req, 10, "cntr_bench");
        if (ci_loop_take_round(loop, a1, len1, &err))
            fail("the first answer", &err);
        stop(S_TAKE1, i);

        memset(&res, 0, sizeof(res));
        res.outcome = CI_EXEC_COMPLETED;
        res.text = "1\n";
        res.text_len = 2;
        res.images = apr_array_make(p, 1, sizeof(const char *));
        evict();
        start();
        calls = ci_loop_round_calls(loop);
        for (k = 0; k < calls->nelts; k++) {
            ci_call *c = APR_ARRAY_IDX(calls, k, ci_call *);
            if (ci_loop_may_execute(loop, c))
                ci_loop_record(loop, c, &res);
        }
        stop(S_RECORD, i);
        if (!calls->nelts)
            fail("the first answer has no call", NULL);

        start();
        ci_loop_followup_body(loop, p, ci_loop_next(loop), &n);
        stop(S_FOLLOWUP, i);

        evict();
        start();
        if (ci_loop_take_round(loop, a2, len2, &err))
            fail("the second answer", &err);
        stop(S_TAKE2, i);
        if (ci_loop_next(loop) != CI_NEXT_DONE)
            fail("the loop did not end", NULL);

        start();
        ci_json_text(ci_loop_response(loop), &n);
        stop(S_ANSWER, i);

        start();
        apr_pool_destroy(p);
        stop(S_CLEANUP, i);

        apr_pool_create(&p, root);
        evict();
        start();
        parsed = ci_json_parse(p, body, len, &perr);
        stop(S_PARSE_ONLY, i);
        if (!parsed)
            fail("the reference parse", NULL);
        start();
        json_object_to_json_string_ext(parsed, JSON_C_TO_STRING_PLAIN |
                                               JSON_C_TO_STRING_NOSLASHESCAPE);
        stop(S_PRINT_ONLY, i);
        apr_pool_destroy(p);
    }

    {
        double total_cpu = 0, total_wall = 0;
        for (s = 0; s < S_COUNT; s++) {
            double c = bench_median(cpu[s], iters), w = bench_median(wall[s], iters);
            if (s <= S_ANSWER) {
                total_cpu += c;
                total_wall += w;
            }
            printf("{\"step\": \"%s\", \"cpu_us\": %.1f, \"wall_us\": %.1f}\n",
                   names[s], c, w);
        }
        printf("{\"step\": \"module work of one request (the steps above, without "
               "the release)\", \"cpu_us\": %.1f, \"wall_us\": %.1f}\n",
               total_cpu, total_wall);
    }
    apr_pool_destroy(root);
    apr_terminate();
    return 0;
}
