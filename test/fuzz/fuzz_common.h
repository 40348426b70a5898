/*
 * fuzz_common.h - what every fuzz target shares: APR set-up, one pool per
 * input, byte-exact pool allocations, and checks on what the core produces.
 *
 * Pool memory. A real APR pool carves allocations out of 8 KiB blocks, so an
 * overflow of one allocation into the next is invisible to AddressSanitizer.
 * While an input runs, every apr_palloc() on that input's pool (including
 * apr_pcalloc, apr_pstrdup, apr_pstrcat, apr_array_* and friends, which reach
 * apr_palloc through the dynamic linker) gets a malloc() of its own, freed
 * when the pool is destroyed after its cleanups ran. Reads or writes past an
 * allocation, and uses after the pool is gone, are then reported. Set
 * FUZZ_REAL_POOLS=1 in the environment to use APR's own allocator instead.
 *
 * Each input gets a pool with an allocator of its own, destroyed at the end
 * of the input, so anything the core forgets to hand to the pool (json-c
 * objects, malloc'd buffers) is reported as a leak.
 */
#ifndef FUZZ_COMMON_H
#define FUZZ_COMMON_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <apr_general.h>
#include <apr_pools.h>
#include <apr_allocator.h>
#include <apr_strings.h>
#include <json-c/json.h>

#include "ci_json.h"

/* ---- failing loudly ----------------------------------------------------- */

#define FUZZ_CHECK(cond, ...)                                                  \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "fuzz check failed at %s:%d: %s\n  ", __FILE__,    \
                    __LINE__, #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                      \
            fputc('\n', stderr);                                               \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* ---- byte-exact pool allocations ---------------------------------------- */

typedef struct fuzz_block {
    struct fuzz_block *next;
    /* 16-byte aligned header: user memory follows */
    void *pad;
} fuzz_block;

static apr_pool_t *fuzz_tracked_pool;     /* the input's pool, or NULL */
static fuzz_block *fuzz_blocks;
static int fuzz_real_pools;
static void *(*fuzz_real_palloc)(apr_pool_t *, apr_size_t);

static inline void *fuzz_real_palloc_call(apr_pool_t *p, apr_size_t size)
{
    if (!fuzz_real_palloc) {
        fuzz_real_palloc = (void *(*)(apr_pool_t *, apr_size_t))
            dlsym(RTLD_NEXT, "apr_palloc");
        if (!fuzz_real_palloc) {
            fprintf(stderr, "fuzz: cannot find apr_palloc\n");
            abort();
        }
    }
    return fuzz_real_palloc(p, size);
}

/* Interposes libapr's apr_palloc for the whole process. */
void *apr_palloc(apr_pool_t *p, apr_size_t size)
{
    fuzz_block *b;
    if (p != fuzz_tracked_pool)
        return fuzz_real_palloc_call(p, size);
    b = malloc(sizeof(*b) + (size ? size : 1));
    if (!b)
        return NULL;
    b->next = fuzz_blocks;
    fuzz_blocks = b;
    return b + 1;
}

static apr_status_t fuzz_free_blocks(void *data)
{
    (void)data;
    while (fuzz_blocks) {
        fuzz_block *next = fuzz_blocks->next;
        free(fuzz_blocks);
        fuzz_blocks = next;
    }
    fuzz_tracked_pool = NULL;
    return APR_SUCCESS;
}

/* ---- set-up -------------------------------------------------------------- */

static void fuzz_terminate(void)
{
    apr_terminate();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    const char *real = getenv("FUZZ_REAL_POOLS");
    (void)argc;
    (void)argv;
    fuzz_real_pools = real && *real && strcmp(real, "0");
    if (apr_initialize() != APR_SUCCESS) {
        fprintf(stderr, "fuzz: apr_initialize failed\n");
        abort();
    }
    atexit(fuzz_terminate);
    return 0;
}

/* A pool with an allocator of its own: destroying it gives every byte back. */
static inline apr_pool_t *fuzz_pool_create(void)
{
    apr_allocator_t *alloc;
    apr_pool_t *p;
    if (apr_allocator_create(&alloc) != APR_SUCCESS ||
        apr_pool_create_ex(&p, NULL, NULL, alloc) != APR_SUCCESS) {
        fprintf(stderr, "fuzz: cannot create a pool\n");
        abort();
    }
    apr_allocator_owner_set(alloc, p);
    if (!fuzz_real_pools) {
        /* Registered first, so it runs last: after every cleanup of the core,
         * exactly when APR would release the pool's memory. */
        apr_pool_cleanup_register(p, NULL, fuzz_free_blocks,
                                  apr_pool_cleanup_null);
        fuzz_blocks = NULL;
        fuzz_tracked_pool = p;
    }
    return p;
}

static inline void fuzz_pool_destroy(apr_pool_t *p)
{
    apr_pool_destroy(p);
    fuzz_tracked_pool = NULL;
}

/* ---- checks --------------------------------------------------------------- */

/* Strict UTF-8 (no overlongs, no surrogates, nothing past U+10FFFF).
 * Returns -1 when valid, else the offset of the first bad byte. */
static inline long fuzz_utf8_bad_at(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = u[i];
        size_t k, need;
        unsigned min, cp;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF) { need = 1; cp = c & 0x1F; min = 0x80; }
        else if (c >= 0xE0 && c <= 0xEF) { need = 2; cp = c & 0x0F; min = 0x800; }
        else if (c >= 0xF0 && c <= 0xF4) { need = 3; cp = c & 0x07; min = 0x10000; }
        else
            return (long)i;
        for (k = 1; k <= need; k++) {
            if (i + k >= n || (u[i + k] & 0xC0) != 0x80)
                return (long)i;
            cp = (cp << 6) | (u[i + k] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return (long)i;
        i += need + 1;
    }
    return -1;
}

static inline int fuzz_utf8_valid(const char *s, size_t n)
{
    return fuzz_utf8_bad_at(s, n) < 0;
}

/* TEXT (N bytes) parses as strict JSON (RFC numbers, valid UTF-8) into a
 * value of type TYPE. */
static inline void fuzz_check_json(apr_pool_t *p, const char *what, const char *text,
                            size_t n, json_type type)
{
    const char *err = NULL;
    json_object *o;
    long bad;
    FUZZ_CHECK(text != NULL, "%s: no text", what);
    bad = fuzz_utf8_bad_at(text, n);
    FUZZ_CHECK(bad < 0, "%s: invalid UTF-8 at byte %ld of %zu", what, bad, n);
    o = ci_json_parse(p, text, n, &err);
    FUZZ_CHECK(o != NULL, "%s: not JSON (%s): %.*s", what, err ? err : "?",
               (int)(n > 400 ? 400 : n), text);
    FUZZ_CHECK(json_object_is_type(o, type), "%s: JSON of type %s, not %s", what,
               json_type_to_name(json_object_get_type(o)), json_type_to_name(type));
}

/* Serialise OBJ and check the text. */
static inline void fuzz_check_object(apr_pool_t *p, const char *what, json_object *obj)
{
    apr_size_t n = 0;
    const char *text;
    FUZZ_CHECK(obj != NULL, "%s: no object", what);
    text = ci_json_text(obj, &n);
    FUZZ_CHECK(text && strlen(text) == n, "%s: serialised length %zu != %zu",
               what, text ? strlen(text) : 0, (size_t)n);
    fuzz_check_json(p, what, text, n, json_object_get_type(obj));
}

/* A small deterministic generator (splitmix64) for choices made from an
 * input: the same input always takes the same path. */
static inline uint64_t fuzz_hash(const uint8_t *data, size_t size)
{
    uint64_t h = 1469598103934665603ULL;
    size_t i;
    for (i = 0; i < size; i++)
        h = (h ^ data[i]) * 1099511628211ULL;
    return h;
}

static inline uint64_t fuzz_next(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

#endif
