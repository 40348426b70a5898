/* ci_crypto.c - owner hashes and sealing with the server secret. */
#include <string.h>
#include <apr_base64.h>
#include <apr_lib.h>
#include <apr_file_io.h>
#include <apr_strings.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include "ci_crypto.h"

#define KEY_LEN 32
#define NONCE_LEN 12
#define TAG_LEN 16
#define SECRET_MAX 4096

struct ci_secret {
    unsigned char owner_key[KEY_LEN];
    unsigned char seal_key[KEY_LEN];
    unsigned char record_key[KEY_LEN];
};

static apr_status_t wipe_secret(void *data)
{
    OPENSSL_cleanse(data, sizeof(ci_secret));
    return APR_SUCCESS;
}

/* A key for one use: HMAC-SHA256(secret, label). */
static void derive(const unsigned char *bytes, apr_size_t len, const char *label,
                   unsigned char out[KEY_LEN])
{
    unsigned int n = KEY_LEN;
    HMAC(EVP_sha256(), bytes, (int)len, (const unsigned char *)label, strlen(label),
         out, &n);
}

ci_secret *ci_secret_create(apr_pool_t *p, const unsigned char *bytes, apr_size_t len)
{
    ci_secret *s;
    if (len < CI_SECRET_MIN)
        return NULL;
    s = apr_palloc(p, sizeof(*s));
    derive(bytes, len, "mod_code_interpreter owner", s->owner_key);
    derive(bytes, len, "mod_code_interpreter seal", s->seal_key);
    derive(bytes, len, "mod_code_interpreter record", s->record_key);
    apr_pool_cleanup_register(p, s, wipe_secret, apr_pool_cleanup_null);
    return s;
}

ci_secret *ci_secret_generate(apr_pool_t *p)
{
    unsigned char bytes[CI_SECRET_MIN];
    ci_secret *s;
    if (RAND_bytes(bytes, sizeof(bytes)) != 1)
        return NULL;
    s = ci_secret_create(p, bytes, sizeof(bytes));
    OPENSSL_cleanse(bytes, sizeof(bytes));
    return s;
}

const char *ci_secret_read(apr_pool_t *p, const char *path, ci_secret **out)
{
    unsigned char buf[SECRET_MAX + 1];
    apr_size_t n = sizeof(buf);
    apr_file_t *f;
    apr_status_t rv;

    if (apr_file_open(&f, path, APR_FOPEN_READ | APR_FOPEN_BINARY, 0, p) != APR_SUCCESS)
        return apr_psprintf(p, "'%s' cannot be read", path);
    rv = apr_file_read_full(f, buf, sizeof(buf), &n);
    apr_file_close(f);
    if (rv != APR_SUCCESS && rv != APR_EOF)
        n = 0;
    *out = n <= SECRET_MAX ? ci_secret_create(p, buf, n) : NULL;
    OPENSSL_cleanse(buf, sizeof(buf));
    if (!*out)
        return apr_psprintf(p, "'%s' holds %s: expected %d to %d bytes (e.g. "
                               "openssl rand -hex 32 > FILE)", path,
                            n > SECRET_MAX ? "too much" : "too little",
                            CI_SECRET_MIN, SECRET_MAX);
    return NULL;
}

static const char *hex(apr_pool_t *p, const unsigned char *bytes, apr_size_t len)
{
    static const char digits[] = "0123456789abcdef";
    char *out = apr_palloc(p, 2 * len + 1);
    apr_size_t i;
    for (i = 0; i < len; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * len] = '\0';
    return out;
}

const char *ci_owner_key(apr_pool_t *p, const ci_secret *s, const char *owner,
                         apr_size_t len)
{
    unsigned char mac[KEY_LEN];
    unsigned int n = sizeof(mac);
    if (!owner || !len)
        return NULL;
    HMAC(EVP_sha256(), s->owner_key, KEY_LEN, (const unsigned char *)owner, len, mac, &n);
    return apr_pstrcat(p, "own_", hex(p, mac, n), NULL);
}

/* base64url without padding, for a value that goes into keys and URLs. */
static const char *b64url(apr_pool_t *p, const unsigned char *bytes, int len)
{
    char *out = apr_palloc(p, apr_base64_encode_len(len));
    char *c;
    int n = apr_base64_encode_binary(out, bytes, len);
    while (n > 1 && out[n - 2] == '=')
        out[--n - 1] = '\0';
    for (c = out; *c; c++)
        *c = *c == '+' ? '-' : *c == '/' ? '_' : *c;
    return out;
}

static unsigned char *from_b64url(apr_pool_t *p, const char *text, int *len)
{
    apr_size_t n = strlen(text);
    char *std = apr_palloc(p, n + 4);
    unsigned char *out;
    apr_size_t i;
    for (i = 0; i < n; i++) {
        char c = text[i];
        if (!apr_isalnum(c) && c != '-' && c != '_')
            return NULL;
        std[i] = c == '-' ? '+' : c == '_' ? '/' : c;
    }
    while (i % 4)
        std[i++] = '=';
    std[i] = '\0';
    out = apr_palloc(p, apr_base64_decode_len(std));
    *len = apr_base64_decode_binary(out, std);
    return out;
}

/* One AES-256-GCM pass over IN, bound to AAD (may be NULL). ENCRYPT: IN is
 * the plain text, TAG is written; else IN is the cipher text and TAG is
 * checked. 0, or -1. */
static int gcm(const ci_secret *s, int encrypt, const unsigned char *nonce,
               const char *aad, const unsigned char *in, int len, unsigned char *out,
               unsigned char *tag)
{
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int n = 0, ok;
    if (!ctx)
        return -1;
    ok = EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), NULL, s->seal_key, nonce, encrypt) &&
         (!aad || EVP_CipherUpdate(ctx, NULL, &n, (const unsigned char *)aad,
                                   (int)strlen(aad))) &&
         EVP_CipherUpdate(ctx, out, &n, in, len) &&
         (encrypt || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, TAG_LEN, tag)) &&
         EVP_CipherFinal_ex(ctx, out + n, &n) &&
         (!encrypt || EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, TAG_LEN, tag));
    EVP_CIPHER_CTX_free(ctx);
    return ok ? 0 : -1;
}

const char *ci_seal_for(apr_pool_t *p, const ci_secret *s, const char *plain,
                        const char *bound_to)
{
    int len = (int)strlen(plain);
    unsigned char *box = apr_palloc(p, NONCE_LEN + len + TAG_LEN);
    if (RAND_bytes(box, NONCE_LEN) != 1 ||
        gcm(s, 1, box, bound_to, (const unsigned char *)plain, len, box + NONCE_LEN,
            box + NONCE_LEN + len))
        return NULL;
    return b64url(p, box, NONCE_LEN + len + TAG_LEN);
}

const char *ci_unseal_for(apr_pool_t *p, const ci_secret *s, const char *sealed,
                          const char *bound_to)
{
    int len = 0;
    unsigned char *box = from_b64url(p, sealed, &len);
    char *plain;
    if (!box || len < NONCE_LEN + TAG_LEN)
        return NULL;
    len -= NONCE_LEN + TAG_LEN;
    plain = apr_palloc(p, len + 1);
    if (gcm(s, 0, box, bound_to, box + NONCE_LEN, len, (unsigned char *)plain,
            box + NONCE_LEN + len))
        return NULL;
    plain[len] = '\0';
    return plain;
}

const char *ci_seal(apr_pool_t *p, const ci_secret *s, const char *plain)
{
    return ci_seal_for(p, s, plain, NULL);
}

const char *ci_unseal(apr_pool_t *p, const ci_secret *s, const char *sealed)
{
    return ci_unseal_for(p, s, sealed, NULL);
}

const char *ci_record_auth(apr_pool_t *p, const ci_secret *s, const char *const *fields,
                           int n)
{
    unsigned char mac[KEY_LEN];
    unsigned int len = sizeof(mac);
    const char *msg = "";
    int i;
    /* each field with its length first: no two lists read alike */
    for (i = 0; i < n; i++)
        msg = apr_psprintf(p, "%s%c%" APR_SIZE_T_FMT ":%s", msg, fields[i] ? 's' : 'n',
                           fields[i] ? strlen(fields[i]) : 0, fields[i] ? fields[i] : "");
    if (!HMAC(EVP_sha256(), s->record_key, KEY_LEN, (const unsigned char *)msg,
              strlen(msg), mac, &len))
        return NULL;
    return hex(p, mac, len);
}

int ci_secret_equal(const char *a, const char *b)
{
    size_t n;
    if (!a || !b)
        return 0;
    n = strlen(a);
    return n == strlen(b) && CRYPTO_memcmp(a, b, n) == 0;
}
