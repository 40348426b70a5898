/*
 * fuzz_supproto.c - the sandbox supervisor's frame reader and payload
 * parsers fed what a peer could send on its socket.
 *
 * The input is the byte stream of one connection; it arrives in pieces of
 * 1 to 64 bytes (now and then a large one), sizes picked by a hash of the
 * input. Every whole frame is parsed as the supervisor would: HELLO's
 * version, CREATE and WARM_TAKE's definition, WARM_SET's list.
 *
 * Checked: no crash, leak or undefined behaviour; each frame's payload is
 * NUL-terminated at its length; a definition that parses re-encodes to the
 * same canonical text, and that text parses again to the same text; the
 * frames do not depend on how the stream was split.
 */
#include "fuzz_common.h"
#include "ci_sandbox.h"
#include "ci_supervisor_wire.h"

#define MAX_FRAMES 4096

typedef struct seen {
    int n;
    int types[MAX_FRAMES];
    apr_size_t lens[MAX_FRAMES];
    int broken;
} seen;

static void check_create(apr_pool_t *p, const ci_sup_frame *f)
{
    ci_sandbox_def *def = NULL, *again = NULL;
    const char *tag = NULL, *text = NULL, *text2 = NULL, *tag2 = NULL, *payload;
    apr_size_t len;
    ci_sup_frame g;
    if (ci_sup_create_decode(p, f, &def, &tag, &text))
        return;
    FUZZ_CHECK(!strcmp(text, ci_sup_def_encode(p, def)), "canonical text differs");
    payload = ci_sup_create_encode(p, def, tag, &len);
    g.type = f->type;
    g.id = 0;
    g.data = payload;
    g.len = len;
    FUZZ_CHECK(!ci_sup_create_decode(p, &g, &again, &tag2, &text2),
               "a re-encoded definition is refused");
    FUZZ_CHECK(!strcmp(text, text2) && !strcmp(tag, tag2), "round trip differs");
}

static void check_frame(apr_pool_t *p, const ci_sup_frame *f)
{
    const char *err = NULL;
    FUZZ_CHECK(f->data[f->len] == '\0', "payload not NUL-terminated");
    switch (f->type) {
    case CI_SUP_HELLO:
        (void)ci_sup_hello_version(f);
        break;
    case CI_SUP_CREATE:
    case CI_SUP_WARM_TAKE:
        check_create(p, f);
        break;
    case CI_SUP_WARM_SET:
        (void)ci_sup_warm_decode(p, f, &err);
        break;
    default:
        break;
    }
}

static void read_stream(apr_pool_t *p, const uint8_t *data, size_t size, uint64_t *st,
                        int one_shot, seen *out)
{
    ci_sup_reader *r = ci_sup_reader_create(p);
    ci_sup_frame f;
    size_t at = 0;
    memset(out, 0, sizeof(*out));
    while (at < size && !out->broken) {
        uint64_t x = fuzz_next(st);
        size_t n = one_shot ? size - at
                 : (x & 0xF00) == 0 ? (size_t)(x % 4096) + 1 : (size_t)(x % 64) + 1;
        char *piece;
        if (n > size - at)
            n = size - at;
        piece = malloc(n);   /* exact size: over-reads are caught */
        memcpy(piece, data + at, n);
        out->broken = ci_sup_reader_feed(r, piece, n) < 0;
        free(piece);
        at += n;
        while (!out->broken && ci_sup_reader_next(r, &f)) {
            if (out->n < MAX_FRAMES) {
                out->types[out->n] = f.type;
                out->lens[out->n] = f.len;
            }
            out->n++;
            if (!one_shot)
                check_frame(p, &f);
        }
        out->broken |= ci_sup_reader_broken(r);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    apr_pool_t *p = fuzz_pool_create();
    uint64_t st = fuzz_hash(data, size);
    static seen split, whole;
    int i;

    read_stream(p, data, size, &st, 0, &split);
    read_stream(p, data, size, &st, 1, &whole);
    /* Frames before a bad length are handed out either way. */
    {
        FUZZ_CHECK(split.n == whole.n, "%d frames split, %d whole", split.n, whole.n);
        for (i = 0; i < split.n && i < MAX_FRAMES; i++)
            FUZZ_CHECK(split.types[i] == whole.types[i] && split.lens[i] == whole.lens[i],
                       "frame %d differs", i);
    }
    FUZZ_CHECK(split.broken == whole.broken, "refusal depends on the split");
    fuzz_pool_destroy(p);
    return 0;
}
