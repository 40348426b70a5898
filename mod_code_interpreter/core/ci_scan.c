/*
 * ci_scan.c - the incremental byte scan for the code_interpreter tool and
 * the hosted shell.
 *
 * Each piece is scanned where it lies. Matches that straddle pieces are
 * looked for in a small window: the last CI_SCAN_CARRY bytes seen before the
 * piece, then its first CI_SCAN_CARRY bytes. The escape rule walks the
 * backslashes as ci_body_mentions_tool() does (an escaped backslash hides
 * what follows it; "\u00" and two more bytes are one escape; an escape is
 * judged once its six bytes are all there), resuming where the previous piece
 * left off.
 */
#include <string.h>
#include "ci_scan.h"

#if (defined(__x86_64__) || defined(__i386__)) && !defined(CI_SCAN_PORTABLE)
#include <immintrin.h>
#endif

/* The names that make a body ours to parse: the code_interpreter tool, and
 * the hosted shell's environments (a shell without one is the client's). Each
 * has one '_', at the same place in the last two. */
static const struct { const char *text; apr_size_t len, underscore; } names[] = {
    { "code_interpreter", 16, 4 },
    { "container_auto", 14, 9 },
    { "container_reference", 19, 9 },
};
#define NAMES (sizeof(names) / sizeof(*names))
#define ESCAPE_LEN 6                      /* \u00XX */

void ci_scan_init(ci_scan *s)
{
    memset(s, 0, sizeof(*s));
}

static int hex(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
         : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

static int is_u00(const char *at)
{
    return at[1] == 'u' && at[2] == '0' && at[3] == '0';
}

/* The escape at AT (its six bytes there) spells a lowercase letter or '_'. */
static int escapes_name_char(const char *at)
{
    int hi = hex(at[4]), lo = hex(at[5]), v = hi * 16 + lo;
    return is_u00(at) && hi >= 0 && lo >= 0 && ((v >= 'a' && v <= 'z') || v == '_');
}

/* Walk the backslashes of D[*POS, UPTO); an escape's bytes may reach past
 * UPTO, up to LEN. Returns 1 at an escaped name character; else 0 with *POS
 * where the walk stands: at or past UPTO, or (below UPTO) at a backslash
 * whose escape is not complete in D. */
static int walk_escapes(const char *d, apr_size_t len, apr_size_t upto, apr_size_t *pos)
{
    apr_size_t i = *pos;
    while (i < upto) {
        const char *at = memchr(d + i, '\\', upto - i);
        if (!at) {
            i = upto;
            break;
        }
        if ((apr_size_t)(d + len - at) < ESCAPE_LEN) {
            *pos = (apr_size_t)(at - d);
            return 0;
        }
        if (escapes_name_char(at))
            return 1;
        i = (apr_size_t)(at - d) + (is_u00(at) ? ESCAPE_LEN : at[1] == '\\' ? 2 : 1);
    }
    *pos = i;
    return 0;
}

/* A name around the '_' at AT, when it lies wholly in D[0, LEN) (the seam
 * finds the others). */
static int name_around(const char *d, apr_size_t len, apr_size_t at)
{
    unsigned i;
    for (i = 0; i < NAMES; i++)
        if (at >= names[i].underscore &&
            at - names[i].underscore + names[i].len <= len &&
            !memcmp(d + at - names[i].underscore, names[i].text, names[i].len))
            return 1;
    return 0;
}

/* The name around any '_' of D[FROM, LEN), when it lies wholly in D[0, LEN):
 * a '_' is rare in a body, so memchr skips most of it. */
static int name_at_underscores_from(const char *d, apr_size_t len, apr_size_t from)
{
    const char *at = d + from, *end = d + len;
    while (at < end && (at = memchr(at, '_', (apr_size_t)(end - at)))) {
        if (name_around(d, len, (apr_size_t)(at - d)))
            return 1;
        at++;
    }
    return 0;
}

/* The block scan needs AVX2 (checked at run time); CI_SCAN_PORTABLE builds
 * only the portable scan (the unit tests build both). */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(CI_SCAN_PORTABLE)
#define HAVE_BLOCKS 1
#endif

#ifdef HAVE_BLOCKS

/* Pieces are looked at 64 bytes at a time, each block with the byte after it
 * (a backslash at its end may begin "\u"). A block is "hot" when it has a
 * '_' (the name's), a backslash followed by 'u' (an escape that may count)
 * or a backslash as its last byte (which may hide the next block's first
 * one). Any other block holds no match and leaves nothing for the next block
 * to finish: its backslashes need no walk. Most blocks are not hot. */
#define BLOCK 64

typedef struct hot_block {
    apr_uint64_t underscores;         /* bit i: byte i is '_' */
    apr_uint64_t escapes;             /* bit i: bytes i, i + 1 are "\u" */
} hot_block;

/* The first hot block from B on whose next byte is in D[0, LEN), with its
 * masks in *H; else where the blocks end. 32 bytes per instruction (AVX2). */
__attribute__((target("avx2")))
static apr_size_t find_hot(const char *d, apr_size_t b, apr_size_t len, hot_block *h)
{
    const __m256i bsl = _mm256_set1_epi8('\\'), und = _mm256_set1_epi8('_'),
                  u = _mm256_set1_epi8('u');
    for (; b + BLOCK < len; b += BLOCK) {
        __m256i v0 = _mm256_loadu_si256((const void *)(d + b));
        __m256i v1 = _mm256_loadu_si256((const void *)(d + b + 32));
        __m256i w0 = _mm256_loadu_si256((const void *)(d + b + 1));
        __m256i w1 = _mm256_loadu_si256((const void *)(d + b + 33));
        __m256i us0 = _mm256_cmpeq_epi8(v0, und), us1 = _mm256_cmpeq_epi8(v1, und);
        __m256i es0 = _mm256_and_si256(_mm256_cmpeq_epi8(v0, bsl), _mm256_cmpeq_epi8(w0, u));
        __m256i es1 = _mm256_and_si256(_mm256_cmpeq_epi8(v1, bsl), _mm256_cmpeq_epi8(w1, u));
        __m256i any = _mm256_or_si256(_mm256_or_si256(us0, us1), _mm256_or_si256(es0, es1));
        if (_mm256_testz_si256(any, any) && d[b + BLOCK - 1] != '\\')
            continue;
        h->underscores = (apr_uint64_t)(unsigned)_mm256_movemask_epi8(us0) |
                         (apr_uint64_t)(unsigned)_mm256_movemask_epi8(us1) << 32;
        h->escapes = (apr_uint64_t)(unsigned)_mm256_movemask_epi8(es0) |
                     (apr_uint64_t)(unsigned)_mm256_movemask_epi8(es1) << 32;
        return b;
    }
    return b;
}

static int name_at_underscores(const char *d, apr_size_t len, apr_size_t b,
                               apr_uint64_t underscores)
{
    for (; underscores; underscores &= underscores - 1)
        if (name_around(d, len, b + (apr_size_t)__builtin_ctzll(underscores)))
            return 1;
    return 0;
}

/* The last bytes of the piece D[0, LEN), from TAIL (a block or less); the
 * blocks before it are done, ESC is where their walk stood. */
static int scan_tail(const char *d, apr_size_t len, apr_size_t tail, int walking,
                     apr_size_t esc, apr_size_t *pos)
{
    if (name_at_underscores_from(d, len, tail))
        return 1;
    if (walking && esc < tail)
        esc = tail;
    if (walking && walk_escapes(d, len, len, &esc))
        return 1;
    *pos = esc;
    return 0;
}

/* The piece D[0, LEN): hot blocks looked at closer, then the tail. Returns 1
 * on a match; else 0 with *POS where the escape walk stands. */
static int scan_blocks(const char *d, apr_size_t len, apr_size_t *pos)
{
    apr_size_t b = 0, esc = *pos;
    int walking = 1;                  /* no incomplete escape met yet */
    hot_block h;

    while ((b = find_hot(d, b, len, &h)) + BLOCK < len) {
        if (h.underscores && name_at_underscores(d, len, b, h.underscores))
            return 1;
        if (walking && (h.escapes || d[b + BLOCK - 1] == '\\')) {
            /* blocks that were not walked left nothing to finish */
            if (esc < b)
                esc = b;
            if (walk_escapes(d, len, b + BLOCK, &esc))
                return 1;
            walking = esc >= b + BLOCK;
        }
        b += BLOCK;
    }
    return scan_tail(d, len, b, walking, esc, pos);
}

#endif

/* The piece D[0, LEN): 1 on a match wholly inside it; else 0 with *POS
 * where the escape walk stands. */
static int scan_piece(const char *d, apr_size_t len, apr_size_t *pos)
{
#ifdef HAVE_BLOCKS
    if (__builtin_cpu_supports("avx2"))
        return scan_blocks(d, len, pos);
#endif
    return name_at_underscores_from(d, len, 0) || walk_escapes(d, len, len, pos);
}

/* The window across the seam: carried bytes, then the head of the piece.
 * Sets *RESUME to where the escape walk stands, in window coordinates. */
static int scan_seam(const ci_scan *s, const char *data, apr_size_t head,
                     apr_size_t *resume)
{
    char win[2 * CI_SCAN_CARRY];
    apr_size_t wlen = s->carry_len + head;
    memcpy(win, s->carry, s->carry_len);
    memcpy(win + s->carry_len, data, head);
    *resume = s->resume;
    return name_at_underscores_from(win, wlen, 0) || walk_escapes(win, wlen, wlen, resume);
}

/* Keep the last bytes seen (the old carry, then DATA) for the next seam;
 * POS is where the escape walk stands, counted from the old carry's start. */
static void carry_over(ci_scan *s, const char *data, apr_size_t len, apr_size_t pos)
{
    apr_size_t total = s->carry_len + len;
    apr_size_t keep = total < CI_SCAN_CARRY ? total : CI_SCAN_CARRY;
    apr_size_t from_old = keep > len ? keep - len : 0;

    memmove(s->carry, s->carry + s->carry_len - from_old, from_old);
    memcpy(s->carry + from_old, data + len - (keep - from_old), keep - from_old);
    s->carry_len = keep;
    /* An incomplete escape lies in the last ESCAPE_LEN - 1 bytes: kept. */
    s->resume = pos - (total - keep);
}

int ci_scan_feed(ci_scan *s, const char *data, apr_size_t len)
{
    apr_size_t head = len < CI_SCAN_CARRY ? len : CI_SCAN_CARRY;
    apr_size_t pos;

    if (s->found || !len)
        return s->found;
    if (scan_seam(s, data, head, &pos))
        return s->found = 1;
    if (head < len) {
        /* The seam's walk stopped in the piece (an incomplete escape there
         * starts past CI_SCAN_CARRY - ESCAPE_LEN): go on from there. */
        apr_size_t dpos = pos - s->carry_len;
        if (scan_piece(data, len, &dpos))
            return s->found = 1;
        pos = s->carry_len + dpos;
    }
    carry_over(s, data, len, pos);
    return 0;
}
