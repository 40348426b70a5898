/*
 * scan.c - what the passthrough path's scan for the tool costs, outside
 * httpd, on the body the benchmark sends:
 *
 *   scan BODY [PIECE [ITERATIONS]]
 *
 * The body is fed to ci_scan in pieces of PIECE bytes (default 8000, what
 * one read from a client's socket gives), as the request side does while it
 * reads. "warm": the body is in the cache (a piece just received is);
 * "cold": the whole body is evicted from the caches first. Also the whole-body scan the
 * request side used before (ci_body_mentions_tool). Thread CPU time, medians,
 * one line of JSON each: {"step": ..., "cpu_us": ...}.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "ci_request.h"
#include "ci_scan.h"
#include "bench_common.h"

#define EVICT_BYTES (64u << 20)          /* larger than the last-level cache */

static double cpu_us(void)
{
    return bench_now_us(CLOCK_THREAD_CPUTIME_ID);
}

/* Feed BODY in PIECE-byte pieces; the CPU time it took. */
static double scan_once(const char *body, size_t len, size_t piece, int *found)
{
    double t0 = cpu_us();
    ci_scan s;
    size_t at;
    ci_scan_init(&s);
    for (at = 0; at < len; at += piece)
        *found |= ci_scan_feed(&s, body + at, len - at < piece ? len - at : piece);
    return cpu_us() - t0;
}

int main(int argc, char **argv)
{
    size_t len, piece;
    char *body, *evict;
    double *v;
    int iters, i, found = 0;
    if (argc < 2) {
        fprintf(stderr, "usage: %s BODY [PIECE [ITERATIONS]]\n", argv[0]);
        return 2;
    }
    body = bench_slurp(argv[1], &len);
    piece = argc > 2 ? (size_t)atol(argv[2]) : 8000;
    iters = argc > 3 ? atoi(argv[3]) : 200;
    if (!piece || iters < 1)
        return 2;
    v = malloc(sizeof(double) * (size_t)iters);
    evict = malloc(EVICT_BYTES);
    if (!v || !evict)
        return 2;
    for (i = 0; i < iters; i++)
        v[i] = scan_once(body, len, piece, &found);
    printf("{\"step\": \"scan in pieces, warm\", \"bytes\": %zu, \"piece\": %zu, "
           "\"found\": %d, \"cpu_us\": %.2f}\n", len, piece, found, bench_median(v, iters));
    for (i = 0; i < iters && i < 40; i++) {
        memset(evict, i, EVICT_BYTES);
        v[i] = scan_once(body, len, piece, &found);
    }
    printf("{\"step\": \"scan in pieces, cold\", \"bytes\": %zu, \"piece\": %zu, "
           "\"found\": %d, \"cpu_us\": %.2f}\n", len, piece, found, bench_median(v, i));
    for (i = 0; i < iters; i++) {
        double t0 = cpu_us();
        found |= ci_body_mentions_tool(body, len);
        v[i] = cpu_us() - t0;
    }
    printf("{\"step\": \"whole-body scan (before)\", \"bytes\": %zu, \"found\": %d, "
           "\"cpu_us\": %.2f}\n", len, found, bench_median(v, iters));
    free(evict);
    free(v);
    free(body);
    return 0;
}
