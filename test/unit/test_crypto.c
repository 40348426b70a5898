/*
 * test_crypto.c - the server secret: owner keys (HMAC-SHA256 with a key
 * derived from the secret) and sealing (AES-256-GCM).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include <apr_general.h>
#include <apr_pools.h>
#include <apr_strings.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "ci_crypto.h"
#include "unit_pool.h"

static const unsigned char SECRET[] = "0123456789abcdef0123456789abcdef-the-secret";

static ci_secret *secret(apr_pool_t *p)
{
    ci_secret *s = ci_secret_create(p, SECRET, sizeof(SECRET) - 1);
    assert_non_null(s);
    return s;
}

/* The owner key, computed independently: HMAC(HMAC(secret, label), owner). */
static const char *expected_owner_key(apr_pool_t *p, const char *owner)
{
    unsigned char key[32], mac[32];
    unsigned int n = 32;
    const char *label = "mod_code_interpreter owner";
    char *out = apr_pstrdup(p, "own_");
    int i;
    HMAC(EVP_sha256(), SECRET, sizeof(SECRET) - 1, (const unsigned char *)label,
         strlen(label), key, &n);
    HMAC(EVP_sha256(), key, 32, (const unsigned char *)owner, strlen(owner), mac, &n);
    for (i = 0; i < 32; i++)
        out = apr_psprintf(p, "%s%02x", out, mac[i]);
    return out;
}

static void test_owner_key(void **state)
{
    apr_pool_t *p = *state;
    ci_secret *s = secret(p);
    const char *a = ci_owner_key(p, s, "Bearer sk-a", 11);
    assert_string_equal(a, expected_owner_key(p, "Bearer sk-a"));
    assert_int_equal(strlen(a), 4 + 64);
    assert_string_not_equal(a, ci_owner_key(p, s, "Bearer sk-b", 11));
    assert_null(ci_owner_key(p, s, "", 0));
    assert_null(ci_owner_key(p, s, NULL, 0));
    /* another secret, another key */
    assert_string_not_equal(a, ci_owner_key(p, ci_secret_generate(p), "Bearer sk-a", 11));
}

static void test_secret_length(void **state)
{
    apr_pool_t *p = *state;
    assert_null(ci_secret_create(p, SECRET, CI_SECRET_MIN - 1));
    assert_non_null(ci_secret_create(p, SECRET, CI_SECRET_MIN));
}

static void test_secret_file(void **state)
{
    apr_pool_t *p = *state;
    char path[] = "/tmp/ci-secret-XXXXXX";
    int fd = mkstemp(path);
    ci_secret *s = NULL;
    FILE *f = fdopen(fd, "w");
    fputs("short", f);
    fclose(f);
    assert_string_equal(ci_secret_read(p, path, &s),
                        apr_psprintf(p, "'%s' holds too little: expected 32 to 4096 "
                                        "bytes (e.g. openssl rand -hex 32 > FILE)", path));
    f = fopen(path, "w");
    fwrite(SECRET, 1, sizeof(SECRET) - 1, f);
    fclose(f);
    assert_null(ci_secret_read(p, path, &s));
    assert_string_equal(ci_owner_key(p, s, "x", 1), expected_owner_key(p, "x"));
    unlink(path);
    assert_string_equal(ci_secret_read(p, path, &s),
                        apr_psprintf(p, "'%s' cannot be read", path));
}

static void test_seal_round_trip(void **state)
{
    apr_pool_t *p = *state;
    ci_secret *s = secret(p);
    const char *sealed = ci_seal(p, s, "envd-token-123");
    const char *again = ci_seal(p, s, "envd-token-123");
    char *altered;
    assert_non_null(sealed);
    assert_null(strstr(sealed, "envd"));
    assert_string_not_equal(sealed, again);          /* a fresh nonce each time */
    assert_string_equal(ci_unseal(p, s, sealed), "envd-token-123");
    assert_string_equal(ci_unseal(p, s, again), "envd-token-123");
    assert_string_equal(ci_unseal(p, s, ci_seal(p, s, "")), "");
    /* another secret, an altered byte, garbage: nothing */
    assert_null(ci_unseal(p, ci_secret_generate(p), sealed));
    altered = apr_pstrdup(p, sealed);
    altered[20] = altered[20] == 'A' ? 'B' : 'A';
    assert_null(ci_unseal(p, s, altered));
    assert_null(ci_unseal(p, s, "not base64!"));
    assert_null(ci_unseal(p, s, "AAAA"));
}

static void test_secret_equal(void **state)
{
    (void)state;
    assert_true(ci_secret_equal("3f2a", "3f2a"));
    assert_false(ci_secret_equal("3f2a", "3f2b"));
    assert_false(ci_secret_equal("3f2a", "3f2"));     /* a prefix is not the value */
    assert_false(ci_secret_equal("3f2", "3f2a"));
    assert_false(ci_secret_equal("", "3f2a"));
    assert_true(ci_secret_equal("", ""));
    assert_false(ci_secret_equal(NULL, "3f2a"));
    assert_false(ci_secret_equal("3f2a", NULL));
    assert_false(ci_secret_equal(NULL, NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_owner_key),
        TEST(test_secret_length),
        TEST(test_secret_file),
        TEST(test_seal_round_trip),
        TEST(test_secret_equal),
    };
    int rc;
    apr_initialize();
    rc = cmocka_run_group_tests_name("ci_crypto", tests, NULL, NULL);
    apr_terminate();
    return rc;
}
