#ifndef CKEYHOLE_OPENSSL_SHIM_H
#define CKEYHOLE_OPENSSL_SHIM_H

// libcrypto (OpenSSL 3) for KeyholeJOSE only: the EVP signature API, key construction from
// parameters, ECDSA signature conversion, digests, PEM private keys and AES-GCM.
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>
#include <openssl/sha.h>

// Macros and constants Swift cannot import as they are.
static inline int ckeyhole_rsa_pkcs1_padding(void) { return RSA_PKCS1_PADDING; }
static inline int ckeyhole_rsa_pkcs1_pss_padding(void) { return RSA_PKCS1_PSS_PADDING; }
static inline int ckeyhole_rsa_pss_saltlen_digest(void) { return RSA_PSS_SALTLEN_DIGEST; }
static inline int ckeyhole_evp_pkey_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }
static inline int ckeyhole_evp_ctrl_gcm_get_tag(void) { return EVP_CTRL_GCM_GET_TAG; }
static inline int ckeyhole_evp_ctrl_gcm_set_tag(void) { return EVP_CTRL_GCM_SET_TAG; }
static inline long ckeyhole_bio_get_mem_data(BIO *bio, char **data) { return BIO_get_mem_data(bio, data); }
// EVP_EC_gen is a macro over the variadic EVP_PKEY_Q_keygen.
static inline EVP_PKEY *ckeyhole_ec_p256_generate(void) { return EVP_EC_gen("P-256"); }

// SHA-256 on a context on the stack. EVP allocates and frees a provider context on every digest's
// init (OpenSSL 3.0), and the one-shot SHA256() goes through EVP too: a session lookup (one digest of
// its token) must not pay that. SHA256_Init/Update/Final, deprecated for EVP in 3.0, are libcrypto's
// own implementation all the same, without allocation.
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
static inline int ckeyhole_sha256(const void *data, size_t count, unsigned char *out) {
    SHA256_CTX context;
    int ok = SHA256_Init(&context) == 1 && SHA256_Update(&context, data, count) == 1 && SHA256_Final(out, &context) == 1;
    OPENSSL_cleanse(&context, sizeof context);
    return ok;
}
#pragma clang diagnostic pop

#endif
