/*
 * ci_crypto.h - the server secret's two uses, with OpenSSL's libcrypto:
 * an owner's keyed hash (HMAC-SHA256), the only form in which an owner is
 * ever stored or compared; and sealing small secrets such as a sandbox's
 * access token (AES-256-GCM) before they go anywhere shared.
 *
 * Its keys are derived from the secret (HMAC-SHA256 of the secret over a
 * label), so the owner hash never reveals the sealing key.
 */
#ifndef CI_CRYPTO_H
#define CI_CRYPTO_H

#include <apr_pools.h>

/* A server secret holds at least this many bytes. */
#define CI_SECRET_MIN 32

typedef struct ci_secret ci_secret;

/* A secret from LEN bytes (at least CI_SECRET_MIN). Memory from P; the
 * bytes are wiped when P goes. NULL when LEN is too short. */
ci_secret *ci_secret_create(apr_pool_t *p, const unsigned char *bytes, apr_size_t len);

/* CI_SECRET_MIN random bytes from the system's random source, as a secret. */
ci_secret *ci_secret_generate(apr_pool_t *p);

/* The secret in a file: its bytes, whatever they are (at least
 * CI_SECRET_MIN of them, at most 4096). NULL or why not (no secret in it). */
const char *ci_secret_read(apr_pool_t *p, const char *path, ci_secret **out);

/* The keyed hash of OWNER (LEN bytes): "own_" and 64 hex digits. An empty
 * owner has none: NULL. */
const char *ci_owner_key(apr_pool_t *p, const ci_secret *s, const char *owner,
                         apr_size_t len);

/* PLAIN sealed: base64url of nonce, ciphertext and tag. */
const char *ci_seal(apr_pool_t *p, const ci_secret *s, const char *plain);

/* The plain text of SEALED, or NULL when it was not sealed with this secret
 * or was altered. */
const char *ci_unseal(apr_pool_t *p, const ci_secret *s, const char *sealed);

/* The same, bound to BOUND_TO (authenticated, not stored: e.g. the id of
 * the record the sealed value belongs to): a sealed value copied elsewhere
 * does not open there. */
const char *ci_seal_for(apr_pool_t *p, const ci_secret *s, const char *plain,
                        const char *bound_to);
const char *ci_unseal_for(apr_pool_t *p, const ci_secret *s, const char *sealed,
                          const char *bound_to);

/* A record's authenticator: HMAC-SHA256, under a key of its own, of the N
 * FIELDS (NULL ones included as such), as 64 hex digits; NULL on failure.
 * Whoever can change the stored record cannot make it match again. */
const char *ci_record_auth(apr_pool_t *p, const ci_secret *s, const char *const *fields,
                           int n);

/* Whether A and B (NUL-terminated; NULL equals nothing) are the same, in a
 * time that does not depend on where they differ (CRYPTO_memcmp): every
 * comparison with an authenticator or an owner's keyed hash goes through
 * it, so that timing answers tell nothing of the value wanted. Only the
 * length may show, and theirs is fixed. */
int ci_secret_equal(const char *a, const char *b);

#endif
