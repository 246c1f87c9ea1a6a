/*
 * st_envelope — client-side encryption of the objects a reader takes whole
 * (docs/ENCRYPTION.md, "What is sealed"): a backend wrapper that seals every
 * manifest, part record and replica record it PUTs in an envelope
 * (st_crypt_seal_object, the object's key as its name) and opens every one
 * it GETs, so the catalog, GC, the mount and the peers read and write them
 * as before. Packs pass through: they are sealed record by record when they
 * are written (st_pack, CKp2) and opened chunk by chunk by the restorer.
 *
 * It also keeps the store marker (`encryption`, plain text) and the mixing
 * rule: the wrapper PUTs the marker before the first sealed object (pack,
 * manifest, part or replica record) it writes; st_envelope_check refuses a
 * key against a store that holds steps and no marker, and no key against a
 * marked store.
 *
 * Threads: ops run concurrently like the inner ones; the marker is written
 * once, under a mutex.
 */
#ifndef ST_ENVELOPE_H
#define ST_ENVELOPE_H

#include "backend/st_backend.h"
#include "format/st_pack.h"
#include "st_error.h"
#include "util/st_hash.h"
#include "util/st_crypt.h"
#include "util/st_keyring.h"

/* The store marker's key and its whole content. */
#define ST_ENVELOPE_MARKER_KEY  "encryption"
#define ST_ENVELOPE_MARKER_BODY "ckptfs-encryption v1 aes-256-gcm\n"

/*!
 * The mixing rule, checked when a store is opened (b: the store's backend,
 * url: for messages). With a keyring: ST_OK when the store has the marker
 * or holds no step; else ST_ERR_KEY "the store at URL is not encrypted;
 * ckptfs does not mix encrypted and plain steps in one store". Without
 * (kr NULL): ST_ERR_KEY "the store at URL is encrypted: give
 * --encryption-key-file" when the marker is there. A backend error as is.
 */
st_err st_envelope_check(st_backend *b, const st_keyring *kr, const char *url);

/*!
 * Replaces *b by a wrapper that seals and opens under kr (which must
 * outlive it) and owns the old *b (closed with it). ST_OK or ST_ERR_NOMEM.
 * A GET of a sealed object opens it whole: ST_ERR_KEY for a key id kr
 * does not hold, ST_ERR_CORRUPT naming the object for a failed tag, a
 * truncated or a plain object.
 */
st_err st_envelope_wrap(st_backend **b, const st_keyring *kr);

/*! As st_envelope_wrap, but *out does not own inner: closing *out leaves
 *  inner open (a backend the caller lent). */
st_err st_envelope_borrow(st_backend *inner, const st_keyring *kr, st_backend **out);

/* The key of the last sealed pack a reader opened a record of: deriving a
 * pack's key (HKDF) costs more than opening a small record, and a reader
 * takes many records of one pack in a row. Zero-initialise; wipe with
 * st_pack_opener_wipe. One thread at a time. */
typedef struct st_pack_opener {
    int valid;
    st_id pack;
    st_pack_seal seal;
    st_crypt_objkey key;
    char name[ST_KEY_MAX]; /* the pack's object key, for messages */
} st_pack_opener;

/*!
 * Opens the record in[0..len) read at `offset` of job's sealed pack `pack`
 * (seal: its key id and salt, from the manifest) into out[0..len -
 * ST_CRYPT_TAG_LEN) (out may be in), with o's key when it is that pack's.
 * ST_OK; ST_ERR_KEY (kr NULL, or no key of the seal's id: named);
 * ST_ERR_CORRUPT naming the pack and offset.
 */
st_err st_envelope_open_chunk(st_pack_opener *o, const st_keyring *kr, const char *job,
                              const st_id *pack, const st_pack_seal *seal, uint64_t offset,
                              const uint8_t *in, size_t len, uint8_t *out);

/*! Wipes o's key; o may be used again. */
void st_pack_opener_wipe(st_pack_opener *o);

#endif
