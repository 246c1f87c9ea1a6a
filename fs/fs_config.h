/*
 * fs_config — ckptfs's configuration file (ckptfs.conf(5)): `key = value`
 * lines whose keys are the long options of fs_option_table, `#` comment
 * lines, blank lines. The file's values are applied before the command
 * line's, so the command line wins.
 *
 * Single-threaded (main, before the mount).
 */
#ifndef FS_CONFIG_H
#define FS_CONFIG_H

#include <stddef.h>

#include "fs_options.h"

/* A loaded file: owns the text the settings' string fields point into. */
typedef struct fs_config fs_config;

/*! Reads PATH and applies every line to *s. A file that holds a secret
 *  (FS_OPT_SECRET key) must be readable by its owner only (no group or
 *  other permission bits) and owned by root or the caller. Returns 0 with
 *  *out set (free it with fs_config_free after the last use of *s), or -1
 *  with "PATH:LINE: what is wrong" (or "PATH: ...") in why[cap]; a secret's
 *  value is never quoted in it. After an error *s is partly set and points
 *  into freed text: do not use it. */
int fs_config_load(const char *path, fs_settings *s, fs_config **out, char *why, size_t cap);

/*! Parses the text TEXT (LEN bytes, may hold anything) as the file NAME
 *  would be, for tests and fs_config_load: *secret_line is the line of the
 *  first FS_OPT_SECRET key set, 0 if there is none. Same returns as
 *  fs_config_load; the values point into *out. */
int fs_config_parse(const char *name, const char *text, size_t len, fs_settings *s,
                    unsigned *secret_line, fs_config **out, char *why, size_t cap);

/*! Frees a loaded file; NULL is a no-op. */
void fs_config_free(fs_config *c);

#endif
