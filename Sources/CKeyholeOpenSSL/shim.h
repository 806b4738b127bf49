#ifndef CKEYHOLE_OPENSSL_SHIM_H
#define CKEYHOLE_OPENSSL_SHIM_H

// libcrypto (OpenSSL 3) for KeyholeJOSE only: the EVP signature API, key construction from
// parameters, ECDSA signature conversion and digests.
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/param_build.h>
#include <openssl/rand.h>
#include <openssl/rsa.h>

// Macros and constants Swift cannot import as they are.
static inline int ckeyhole_rsa_pkcs1_padding(void) { return RSA_PKCS1_PADDING; }
static inline int ckeyhole_rsa_pkcs1_pss_padding(void) { return RSA_PKCS1_PSS_PADDING; }
static inline int ckeyhole_rsa_pss_saltlen_digest(void) { return RSA_PSS_SALTLEN_DIGEST; }
static inline int ckeyhole_evp_pkey_public_key(void) { return EVP_PKEY_PUBLIC_KEY; }

#endif
