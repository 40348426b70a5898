/*
 * ci_egress_sni.c - the server name a TLS ClientHello asks for
 * (ci_egress_content.h): what a CONNECT tunnel to port 443 is checked
 * against, so that a tunnel to an allowed name never carries another
 * (behind a shared CDN, SNI and not the CONNECT picks the site). Every
 * length is checked against what is there; nothing is read past it.
 */
#include <string.h>
#include <apr_strings.h>
#include "ci_egress_content.h"

#define TLS_HANDSHAKE 22
#define HS_CLIENT_HELLO 1
#define RECORD_MAX 16384            /* a plaintext record's fragment (RFC 8446 5.1) */
#define EXT_SERVER_NAME 0
#define NAME_TYPE_HOST 0

/* A cursor over bytes: every take checks what is left. */
typedef struct cursor {
    const unsigned char *at;
    apr_size_t left;
} cursor;

static int take_u8(cursor *c, unsigned *v)
{
    if (c->left < 1)
        return -1;
    *v = c->at[0];
    c->at++;
    c->left--;
    return 0;
}

static int take_u16(cursor *c, unsigned *v)
{
    if (c->left < 2)
        return -1;
    *v = ((unsigned)c->at[0] << 8) | c->at[1];
    c->at += 2;
    c->left -= 2;
    return 0;
}

/* N bytes into *SUB (a cursor of its own). */
static int take_bytes(cursor *c, apr_size_t n, cursor *sub)
{
    if (c->left < n)
        return -1;
    sub->at = c->at;
    sub->left = n;
    c->at += n;
    c->left -= n;
    return 0;
}

/* A vector whose length is LEN_BYTES (1 or 2) long. */
static int take_vector(cursor *c, int len_bytes, cursor *sub)
{
    unsigned n;
    if ((len_bytes == 1 ? take_u8(c, &n) : take_u16(c, &n)) != 0)
        return -1;
    return take_bytes(c, n, sub);
}

ci_egress_hello_status ci_egress_sni_extension(apr_pool_t *p, const unsigned char *ext,
                                               apr_size_t len, const char **name)
{
    cursor c = { ext, len }, list;
    int found = 0;
    if (take_vector(&c, 2, &list) || c.left || list.left == 0)
        return CI_EGRESS_HELLO_BAD;
    while (list.left) {
        unsigned type;
        cursor host;
        const char *normal;
        if (take_u8(&list, &type) || take_vector(&list, 2, &host))
            return CI_EGRESS_HELLO_BAD;
        if (type != NAME_TYPE_HOST)
            continue;
        /* One host_name (RFC 6066 3), and a name: no IP literal. */
        if (found++ || host.left == 0 ||
            ci_egress_host_normalise(p, (const char *)host.at, host.left, &normal) !=
                CI_EGRESS_HOST_NAME)
            return CI_EGRESS_HELLO_BAD;
        *name = normal;
    }
    return found ? CI_EGRESS_HELLO_SNI : CI_EGRESS_HELLO_NO_SNI;
}

/* The extensions of a ClientHello (the cursor at them): SNI, NO_SNI, BAD.
 * An extension twice is BAD (as TLS libraries treat it). */
static ci_egress_hello_status hello_extensions(apr_pool_t *p, cursor *c, const char **name)
{
    cursor exts, body;
    unsigned seen_sni = 0;
    ci_egress_hello_status st = CI_EGRESS_HELLO_NO_SNI;
    if (c->left == 0)
        return CI_EGRESS_HELLO_NO_SNI;         /* no extensions at all */
    if (take_vector(c, 2, &exts) || c->left)
        return CI_EGRESS_HELLO_BAD;
    while (exts.left) {
        unsigned type;
        if (take_u16(&exts, &type) || take_vector(&exts, 2, &body))
            return CI_EGRESS_HELLO_BAD;
        if (type != EXT_SERVER_NAME)
            continue;
        if (seen_sni++)
            return CI_EGRESS_HELLO_BAD;
        st = ci_egress_sni_extension(p, body.at, body.left, name);
        if (st == CI_EGRESS_HELLO_BAD)
            return st;
    }
    return st;
}

/* A whole ClientHello's body (after its 4-byte handshake header). */
static ci_egress_hello_status client_hello(apr_pool_t *p, const unsigned char *b,
                                           apr_size_t n, const char **name)
{
    cursor c = { b, n }, skip;
    unsigned major, minor;
    if (take_u8(&c, &major) || take_u8(&c, &minor) || major != 3 ||
        take_bytes(&c, 32, &skip) ||                   /* random */
        take_vector(&c, 1, &skip) || skip.left > 32 ||  /* session id */
        take_vector(&c, 2, &skip) || skip.left < 2 || (skip.left & 1) ||  /* suites */
        take_vector(&c, 1, &skip) || skip.left < 1)    /* compression methods */
        return CI_EGRESS_HELLO_BAD;
    return hello_extensions(p, &c, name);
}

ci_egress_hello_status ci_egress_hello_sni(apr_pool_t *p, const unsigned char *buf,
                                           apr_size_t len, const char **name)
{
    /* The handshake messages' bytes, the records' headers taken away. */
    unsigned char *hs = apr_palloc(p, CI_EGRESS_HELLO_MAX);
    apr_size_t hs_len = 0, at = 0, need = 0;
    if (len > CI_EGRESS_HELLO_MAX)
        return CI_EGRESS_HELLO_BAD;
    *name = NULL;
    while (at < len) {
        apr_size_t frag;
        if (buf[at] != TLS_HANDSHAKE)
            return CI_EGRESS_HELLO_BAD;
        if (len - at < 5)
            return CI_EGRESS_HELLO_MORE;
        frag = ((apr_size_t)buf[at + 3] << 8) | buf[at + 4];
        if (buf[at + 1] != 3 || frag == 0 || frag > RECORD_MAX)
            return CI_EGRESS_HELLO_BAD;
        if (len - at - 5 < frag)
            return CI_EGRESS_HELLO_MORE;
        memcpy(hs + hs_len, buf + at + 5, frag);     /* hs_len + frag <= len */
        hs_len += frag;
        at += 5 + frag;
        if (hs_len < 4)
            continue;
        if (hs[0] != HS_CLIENT_HELLO)
            return CI_EGRESS_HELLO_BAD;
        need = 4 + (((apr_size_t)hs[1] << 16) | ((apr_size_t)hs[2] << 8) | hs[3]);
        if (need > CI_EGRESS_HELLO_MAX)
            return CI_EGRESS_HELLO_BAD;
        /* No other handshake message comes before the server answers;
         * records after the ClientHello's (early data) go on as they are. */
        if (hs_len >= need)
            return hs_len == need ? client_hello(p, hs + 4, need - 4, name)
                                  : CI_EGRESS_HELLO_BAD;
    }
    return len < CI_EGRESS_HELLO_MAX ? CI_EGRESS_HELLO_MORE : CI_EGRESS_HELLO_BAD;
}
