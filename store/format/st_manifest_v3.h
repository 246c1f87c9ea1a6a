/*
 * st_manifest_v3 — the body of a version 3 manifest, private to the
 * manifest codec: st_manifest.c writes and checks the envelope (magic,
 * version, flags, checksum) and calls these for what lies between.
 *
 * Between header and checksum a version 3 manifest holds the body's length
 * (varint) and one zstd frame of the body: the fields column by column, a
 * bundle table, front-coded paths (docs/FORMATS.md, "Version 3").
 */
#ifndef ST_MANIFEST_V3_H
#define ST_MANIFEST_V3_H

#include <stddef.h>
#include <stdint.h>

#include "format/st_manifest.h"
#include "util/st_wire.h"

/* Appends the body length and the frame of m, which the caller has checked
 * (st_manifest_check_file with version 3, files in tree order). On failure
 * the caller drops what was appended: ST_ERR_INVALID when the body is above
 * the caps a decoder enforces, ST_ERR_NOMEM. */
st_err st_manifest_v3_put_body(st_bytes *out, const st_manifest *m);

/* Decodes p[0..len), the bytes between header and checksum of a version 3
 * or 4 manifest (4: the pack table carries seals), into d (zeroed by the
 * caller, freed by the caller on failure): ST_ERR_CORRUPT for any broken
 * rule, ST_ERR_NOMEM. */
st_err st_manifest_v3_get_body(const uint8_t *p, size_t len, unsigned version, st_manifest *d);

/* Appends p[0..len)'s body length and the body its frame holds (the caps
 * and the frame checked as by st_manifest_v3_get_body). */
st_err st_manifest_v3_unframe(const uint8_t *p, size_t len, st_bytes *out);

#endif
