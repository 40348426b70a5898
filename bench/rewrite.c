/*
 * rewrite.c - the CPU of the client body's rewrite alone (ci_request_rewrite,
 * then the release of its pool), outside httpd, warm caches:
 *
 *   rewrite BODY [ITERATIONS]
 *
 * BODY is a client's request with the code_interpreter tool. Prints one line
 * of JSON: {"cpu_us": median thread CPU per rewrite, "iterations": N}, or
 * fails (exit 1) when the body is not rewritten. bench/rewrite.py builds and
 * runs it on conversations of each shape.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <apr_general.h>
#include <apr_pools.h>
#include "ci_error.h"
#include "ci_request.h"
#include "bench_common.h"

int main(int argc, char **argv)
{
    apr_pool_t *root, *p;
    size_t len;
    char *body;
    double *took;
    int i, n = argc > 2 ? atoi(argv[2]) : 1000;
    if (argc < 2 || n < 1 || !(body = bench_slurp(argv[1], &len))) {
        fprintf(stderr, "usage: rewrite BODY [ITERATIONS]\n");
        return 2;
    }
    apr_initialize();
    apr_pool_create(&root, NULL);
    took = calloc((size_t)n, sizeof(*took));
    for (i = 0; i < n; i++) {
        ci_rewrite_opts opts = { "python", NULL, NULL, NULL, NULL };
        ci_request *req = NULL;
        ci_error err;
        double t0;
        memset(&err, 0, sizeof(err));
        apr_pool_create(&p, root);
        t0 = bench_now_us(CLOCK_THREAD_CPUTIME_ID);
        if (ci_request_rewrite(p, body, len, &opts, &req, &err) != CI_REQ_INTERCEPT) {
            fprintf(stderr, "rewrite: %s was not rewritten: %s\n", argv[1],
                    err.message ? err.message : "no code_interpreter tool");
            return 1;
        }
        apr_pool_destroy(p);
        took[i] = bench_now_us(CLOCK_THREAD_CPUTIME_ID) - t0;
    }
    printf("{\"cpu_us\": %.2f, \"iterations\": %d}\n", bench_median(took, n), n);
    free(took);
    free(body);
    apr_pool_destroy(root);
    apr_terminate();
    return 0;
}
