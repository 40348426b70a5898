/*
 * ci_egress_tls.c - the egress proxy's certificates and TLS contexts
 * (ci_egress_tls.h). The CA's key lives in memory only: the supervisor
 * makes it (ci_egress_make_ca) and hands its PEM to every proxy it starts.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <apr_strings.h>
#include <openssl/bn.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>
#include "ci_egress_content.h"
#include "ci_egress_tls.h"

#define CA_NAME "mod_code_interpreter egress CA"
#define CA_DAYS 730
#define LEAF_DAYS 30
#define BACKDATE_SECONDS 3600
#define LEAF_CACHE_MAX 1024

static int sni_check_index = -1;      /* an SSL's ci_egress_sni_check */
static X509 *ca_cert;
static EVP_PKEY *ca_key;
static EVP_PKEY *leaf_key;

/* ---- keys and certificates ----------------------------------------------- */

static EVP_PKEY *new_p256_key(void)
{
    EVP_PKEY_CTX *kc = EVP_PKEY_CTX_new_id(EVP_PKEY_EC, NULL);
    EVP_PKEY *k = NULL;
    if (!kc || EVP_PKEY_keygen_init(kc) <= 0 ||
        EVP_PKEY_CTX_set_ec_paramgen_curve_nid(kc, NID_X9_62_prime256v1) <= 0 ||
        EVP_PKEY_keygen(kc, &k) <= 0) {
        EVP_PKEY_free(k);
        k = NULL;
    }
    EVP_PKEY_CTX_free(kc);
    return k;
}

/* NID's extension with VALUE (OpenSSL's configuration syntax) on CERT,
 * issued by ISSUER. 0 or -1. */
static int add_ext(X509 *cert, X509 *issuer, int nid, const char *value)
{
    X509V3_CTX ctx;
    X509_EXTENSION *ext;
    int ok;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer, cert, NULL, NULL, 0);
    ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
    ok = ext && X509_add_ext(cert, ext, -1);
    X509_EXTENSION_free(ext);
    return ok ? 0 : -1;
}

/* A random positive serial of 127 bits. */
static int set_serial(X509 *x)
{
    BIGNUM *bn = BN_new();
    int ok = bn && BN_rand(bn, 127, BN_RAND_TOP_ANY, BN_RAND_BOTTOM_ANY) &&
             BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
    BN_free(bn);
    return ok ? 0 : -1;
}

/* A v3 certificate of PUB named SUBJECT (CN, or NULL: an empty subject),
 * issued by ISSUER_NAME, valid from an hour ago for DAYS. */
static X509 *new_cert(EVP_PKEY *pub, const char *subject, X509_NAME *issuer_name, int days)
{
    X509 *x = X509_new();
    X509_NAME *name = X509_NAME_new();
    int ok = x && name && X509_set_version(x, 2) && set_serial(x) == 0 &&
             X509_set_pubkey(x, pub) &&
             X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_SECONDS) &&
             X509_time_adj_ex(X509_getm_notAfter(x), days, 0, NULL);
    if (ok && subject)
        ok = X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                                        (const unsigned char *)subject, -1, -1, 0);
    ok = ok && X509_set_subject_name(x, name) &&
         X509_set_issuer_name(x, issuer_name ? issuer_name : name);
    X509_NAME_free(name);
    if (!ok) {
        X509_free(x);
        return NULL;
    }
    return x;
}

/* X (or KEY) as PEM text in P, or NULL. */
static char *pem_of(apr_pool_t *p, X509 *x, EVP_PKEY *key)
{
    BIO *bio = BIO_new(BIO_s_mem());
    char *data, *out = NULL;
    long n;
    int ok = bio && (x ? PEM_write_bio_X509(bio, x)
                       : PEM_write_bio_PrivateKey(bio, key, NULL, NULL, 0, NULL, NULL));
    if (ok && (n = BIO_get_mem_data(bio, &data)) > 0) {
        out = apr_pstrmemdup(p, data, (apr_size_t)n);
        if (!x)
            OPENSSL_cleanse(data, (size_t)n);   /* no key text left in freed memory */
    }
    BIO_free(bio);
    return out;
}

static X509 *make_ca_cert(EVP_PKEY *key)
{
    X509 *x = new_cert(key, CA_NAME, NULL, CA_DAYS);
    if (x && (add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") ||
              add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") ||
              add_ext(x, x, NID_subject_key_identifier, "hash") ||
              add_ext(x, x, NID_authority_key_identifier, "keyid:always") ||
              !X509_sign(x, key, EVP_sha256()))) {
        X509_free(x);
        x = NULL;
    }
    return x;
}

const char *ci_egress_make_ca(apr_pool_t *p, ci_egress_ca *out)
{
    EVP_PKEY *key = new_p256_key();
    X509 *x = key ? make_ca_cert(key) : NULL;
    const char *err = NULL;
    memset(out, 0, sizeof(*out));
    if (!x)
        err = "the egress CA's key or certificate could not be made";
    else if (!(out->cert_pem = pem_of(p, x, NULL)) || !(out->key_pem = pem_of(p, NULL, key)))
        err = "the egress CA could not be written as PEM";
    X509_free(x);
    EVP_PKEY_free(key);
    ERR_clear_error();
    return err;
}

/* ---- the CA in the proxy --------------------------------------------------- */

int ci_egress_tls_load_ca(const ci_egress_ca *ca)
{
    BIO *cb, *kb;
    ci_egress_tls_drop_ca();
    if (!ca)
        return 0;
    if (!ca->cert_pem || !ca->key_pem)
        return -1;
    cb = BIO_new_mem_buf(ca->cert_pem, -1);
    kb = BIO_new_mem_buf(ca->key_pem, -1);
    ca_cert = cb ? PEM_read_bio_X509(cb, NULL, NULL, NULL) : NULL;
    ca_key = kb ? PEM_read_bio_PrivateKey(kb, NULL, NULL, NULL) : NULL;
    BIO_free(cb);
    BIO_free(kb);
    ERR_clear_error();
    if (!ca_cert || !ca_key || X509_check_private_key(ca_cert, ca_key) != 1) {
        ci_egress_tls_drop_ca();
        ERR_clear_error();
        return -1;
    }
    return 0;
}

void ci_egress_tls_drop_ca(void)
{
    X509_free(ca_cert);
    EVP_PKEY_free(ca_key);
    EVP_PKEY_free(leaf_key);
    ca_cert = NULL;
    ca_key = NULL;
    leaf_key = NULL;
}

int ci_egress_tls_init(void)
{
    if (!ca_cert)
        return 0;
    if (sni_check_index < 0 &&
        (sni_check_index = SSL_get_ex_new_index(0, NULL, NULL, NULL, NULL)) < 0) {
        ci_egress_tls_drop_ca();
        return -1;
    }
    if (!(leaf_key = new_p256_key())) {
        ci_egress_tls_drop_ca();
        return -1;
    }
    return 0;
}

int ci_egress_tls_can_terminate(void)
{
    return ca_cert && ca_key && leaf_key;
}

/* ---- the proxy as a client of origins ------------------------------------- */

static const unsigned char alpn_http11[] = "\x08http/1.1";

static void common_options(SSL_CTX *ctx)
{
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION);
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
}

SSL_CTX *ci_egress_tls_client_ctx(const char *origin_ca)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    int ok = ctx != NULL;
    if (ok) {
        common_options(ctx);
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
        ok = (origin_ca ? SSL_CTX_load_verify_locations(ctx, origin_ca, NULL)
                        : SSL_CTX_set_default_verify_paths(ctx)) == 1 &&
             SSL_CTX_set_alpn_protos(ctx, alpn_http11, sizeof(alpn_http11) - 1) == 0;
    }
    ERR_clear_error();
    if (!ok) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    return ctx;
}

SSL *ci_egress_tls_client_ssl(SSL_CTX *ctx, int fd, const char *host)
{
    SSL *ssl = SSL_new(ctx);
    X509_VERIFY_PARAM *param = ssl ? SSL_get0_param(ssl) : NULL;
    if (!ssl)
        return NULL;
    X509_VERIFY_PARAM_set_hostflags(param, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    if (!SSL_set_fd(ssl, fd) || !SSL_set_tlsext_host_name(ssl, host) ||
        !X509_VERIFY_PARAM_set1_host(param, host, 0)) {
        SSL_free(ssl);
        ERR_clear_error();
        return NULL;
    }
    return ssl;
}

/* ---- the proxy as the sandbox's server ----------------------------------- */

/* ALPN: http/1.1 when the client offers it; else none. */
static int select_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                         const unsigned char *in, unsigned int inlen, void *arg)
{
    unsigned char *sel;
    (void)ssl;
    (void)arg;
    if (SSL_select_next_proto(&sel, outlen, alpn_http11, sizeof(alpn_http11) - 1, in,
                              inlen) != OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_NOACK;
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

static X509 *make_leaf(const char *host)
{
    X509 *x = new_cert(leaf_key, strlen(host) <= 64 ? host : NULL,
                       X509_get_subject_name(ca_cert), LEAF_DAYS);
    char *san = x ? OPENSSL_malloc(strlen(host) + 16) : NULL;
    int ok = san != NULL;
    if (ok) {
        /* HOST is a normalised name (letters, digits, '-', '.'): nothing in
         * it is configuration syntax. */
        strcpy(san, strlen(host) <= 64 ? "DNS:" : "critical,DNS:");
        strcat(san, host);
        ok = !add_ext(x, ca_cert, NID_basic_constraints, "critical,CA:FALSE") &&
             !add_ext(x, ca_cert, NID_key_usage, "critical,digitalSignature") &&
             !add_ext(x, ca_cert, NID_ext_key_usage, "serverAuth") &&
             !add_ext(x, ca_cert, NID_subject_alt_name, san) &&
             !add_ext(x, ca_cert, NID_subject_key_identifier, "hash") &&
             !add_ext(x, ca_cert, NID_authority_key_identifier, "keyid:always") &&
             X509_sign(x, ca_key, EVP_sha256());
    }
    OPENSSL_free(san);
    if (!ok) {
        X509_free(x);
        x = NULL;
    }
    return x;
}

/* The ClientHello of a terminated tunnel: on only when its server name is
 * the tunnel's (the check's host), else the handshake ends with an alert
 * and the check says why. */
static int check_client_hello(SSL *ssl, int *alert, void *arg)
{
    ci_egress_sni_check *check = SSL_get_ex_data(ssl, sni_check_index);
    const unsigned char *ext;
    size_t len;
    const char *name = NULL;
    apr_pool_t *p;
    (void)arg;
    *alert = SSL_AD_UNRECOGNIZED_NAME;
    if (!check)
        return SSL_CLIENT_HELLO_ERROR;
    check->verdict = CI_EGRESS_HELLO_NO_SNI;
    if (!SSL_client_hello_get0_ext(ssl, TLSEXT_TYPE_server_name, &ext, &len))
        return SSL_CLIENT_HELLO_ERROR;
    if (apr_pool_create_unmanaged_ex(&p, NULL, NULL) != APR_SUCCESS)
        return SSL_CLIENT_HELLO_ERROR;
    check->verdict = ci_egress_sni_extension(p, ext, len, &name);
    if (check->verdict == CI_EGRESS_HELLO_SNI) {
        apr_cpystrn(check->name, name, sizeof(check->name));
        if (!strcmp(name, check->host))
            check->verdict = 0;
    }
    apr_pool_destroy(p);
    return check->verdict == 0 ? SSL_CLIENT_HELLO_SUCCESS : SSL_CLIENT_HELLO_ERROR;
}

static SSL_CTX *make_server_ctx(const char *host)
{
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    X509 *leaf = ctx ? make_leaf(host) : NULL;
    int ok = leaf && SSL_CTX_use_certificate(ctx, leaf) == 1 &&
             SSL_CTX_use_PrivateKey(ctx, leaf_key) == 1;
    X509_free(leaf);
    if (!ok) {
        SSL_CTX_free(ctx);
        return NULL;
    }
    common_options(ctx);
    SSL_CTX_set_alpn_select_cb(ctx, select_http11, NULL);
    SSL_CTX_set_client_hello_cb(ctx, check_client_hello, NULL);
    return ctx;
}

/* The hosts' contexts, made once each. */
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct leaf_entry {
    char *host;
    SSL_CTX *ctx;
} cache[LEAF_CACHE_MAX];
static int ncache;

static SSL_CTX *cache_find(const char *host)
{
    int i;
    for (i = 0; i < ncache; i++)
        if (!strcmp(cache[i].host, host))
            return cache[i].ctx;
    return NULL;
}

/* HOST's context, one reference the caller's. */
static SSL_CTX *server_ctx(const char *host)
{
    SSL_CTX *ctx;
    pthread_mutex_lock(&cache_lock);
    if ((ctx = cache_find(host)) != NULL)
        SSL_CTX_up_ref(ctx);
    else if ((ctx = make_server_ctx(host)) != NULL && ncache < LEAF_CACHE_MAX &&
             (cache[ncache].host = strdup(host)) != NULL) {
        cache[ncache++].ctx = ctx;
        SSL_CTX_up_ref(ctx);
    }
    pthread_mutex_unlock(&cache_lock);
    ERR_clear_error();
    return ctx;
}

SSL *ci_egress_tls_server_ssl(int fd, const char *host, ci_egress_sni_check *check)
{
    SSL_CTX *ctx;
    SSL *ssl;
    if (!ci_egress_tls_can_terminate() || !(ctx = server_ctx(host)))
        return NULL;
    ssl = SSL_new(ctx);
    SSL_CTX_free(ctx);      /* the SSL holds its own reference */
    check->host = host;
    check->verdict = 0;
    check->name[0] = '\0';
    if (ssl && (!SSL_set_fd(ssl, fd) || !SSL_set_ex_data(ssl, sni_check_index, check))) {
        SSL_free(ssl);
        ssl = NULL;
    }
    ERR_clear_error();
    return ssl;
}
