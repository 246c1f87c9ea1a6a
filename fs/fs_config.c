/*
 * fs_config — reads and checks ckptfs's configuration file (fs_config.h,
 * ckptfs.conf(5)).
 *
 * Grammar, one line at a time: blank; `#` (after optional blanks) starts a
 * comment line; otherwise `key = value` with blanks around either side
 * trimmed. A `#` inside a value is part of it (a step pattern may hold one),
 * so there are no trailing comments. Each key may appear once, and must be
 * a long option of fs_option_table (not --config). Errors name the file and
 * the line, and never quote a secret's value.
 *
 * The file is read whole into one buffer that the settings' strings point
 * into; that buffer is the fs_config.
 */
#include "fs_config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define CONFIG_MAX_BYTES (1u << 20) /* a configuration, not a data file */

struct fs_config {
    char *text; /* the file, NUL-terminated lines */
};

void fs_config_free(fs_config *c)
{
    if (!c)
        return;
    free(c->text);
    free(c);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r';
}

static char *trim(char *begin, char *end)
{
    while (begin < end && is_blank(*begin))
        begin++;
    while (end > begin && is_blank(end[-1]))
        end--;
    *end = '\0';
    return begin;
}

/* Applies one non-comment line. Returns 0 or -1 with why set. */
static int apply_line(const char *name, unsigned lineno, char *line, char *end, fs_settings *s,
                      unsigned *seen, unsigned *secret_line, char *why, size_t cap)
{
    char *eq = memchr(line, '=', (size_t)(end - line));
    if (!eq) {
        snprintf(why, cap, "%s:%u: expected 'key = value'", name, lineno);
        return -1;
    }
    char *key = trim(line, eq);
    char *value = trim(eq + 1, end);
    const fs_option *o = fs_option_find(key);
    if (!o || (o->flags & FS_OPT_CLI_ONLY)) {
        /* The key is printed escaped: it may hold anything the file does. */
        char shown[64];
        size_t n = 0;
        for (const char *k = key; *k && n + 5 < sizeof shown; k++)
            n += (size_t)snprintf(shown + n, sizeof shown - n,
                                  *k >= 0x20 && *k < 0x7f ? "%c" : "\\x%02x", (unsigned char)*k);
        snprintf(why, cap,
                 "%s:%u: unknown key '%s' (the keys are ckptfs's long options: "
                 "ckptfs.conf(5))",
                 name, lineno, shown);
        return -1;
    }
    size_t idx = (size_t)(o - fs_option_table);
    if (seen[idx]) {
        snprintf(why, cap, "%s:%u: '%s' is set twice (first on line %u)", name, lineno, key,
                 seen[idx]);
        return -1;
    }
    seen[idx] = lineno;
    char detail[256];
    if (fs_option_set(o, value, s, detail, sizeof detail)) {
        snprintf(why, cap, "%s:%u: %s %s", name, lineno, key, detail);
        return -1;
    }
    if ((o->flags & FS_OPT_SECRET) && !*secret_line)
        *secret_line = lineno;
    return 0;
}

int fs_config_parse(const char *name, const char *text, size_t len, fs_settings *s,
                    unsigned *secret_line, fs_config **out, char *why, size_t cap)
{
    int rc = -1;
    unsigned *seen = calloc(fs_option_count, sizeof *seen);
    fs_config *c = calloc(1, sizeof *c);
    *out = NULL;
    *secret_line = 0;
    if (!seen || !c || !(c->text = malloc(len + 1))) {
        snprintf(why, cap, "%s: out of memory", name);
        goto out;
    }
    if (memchr(text, '\0', len)) {
        snprintf(why, cap, "%s: holds a NUL byte: not a text file", name);
        goto out;
    }
    memcpy(c->text, text, len);
    c->text[len] = '\0';
    unsigned lineno = 0;
    for (char *line = c->text; line < c->text + len;) {
        char *nl = strchr(line, '\n');
        char *end = nl ? nl : c->text + len;
        lineno++;
        *end = '\0';
        char *first = line;
        while (first < end && is_blank(*first))
            first++;
        if (first < end && *first != '#' &&
            apply_line(name, lineno, first, end, s, seen, secret_line, why, cap))
            goto out;
        line = end + 1;
    }
    *out = c;
    c = NULL;
    rc = 0;
out:
    fs_config_free(c);
    free(seen);
    return rc;
}

/* Reads the whole open file into a fresh buffer (NUL-terminated). */
static int read_all(int fd, const char *path, char **text, size_t *len, char *why, size_t cap)
{
    char *buf = malloc(CONFIG_MAX_BYTES + 1);
    size_t used = 0;
    if (!buf) {
        snprintf(why, cap, "%s: out of memory", path);
        return -1;
    }
    for (;;) {
        ssize_t n = read(fd, buf + used, CONFIG_MAX_BYTES + 1 - used);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            snprintf(why, cap, "%s: %s", path, strerror(errno));
            free(buf);
            return -1;
        }
        if (n == 0)
            break;
        used += (size_t)n;
        if (used > CONFIG_MAX_BYTES) {
            snprintf(why, cap, "%s: larger than %u bytes: not a configuration file", path,
                     CONFIG_MAX_BYTES);
            free(buf);
            return -1;
        }
    }
    *text = buf;
    *len = used;
    return 0;
}

int fs_config_load(const char *path, fs_settings *s, fs_config **out, char *why, size_t cap)
{
    int rc = -1;
    char *text = NULL;
    size_t len = 0;
    unsigned secret_line = 0;
    struct stat st;
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &st) != 0) {
        snprintf(why, cap, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(why, cap, "%s: not a regular file", path);
        goto out;
    }
    if (read_all(fd, path, &text, &len, why, cap) ||
        fs_config_parse(path, text, len, s, &secret_line, out, why, cap))
        goto out;
    /* Checked on the descriptor that was read, so a file swapped in between
     * cannot pass. */
    if (secret_line && (st.st_mode & 077)) {
        snprintf(why, cap,
                 "%s:%u: holds a secret but is readable by group or others (mode %04o): "
                 "chmod 600 %s",
                 path, secret_line, (unsigned)(st.st_mode & 07777), path);
        goto out;
    }
    if (secret_line && st.st_uid != 0 && st.st_uid != geteuid()) {
        snprintf(why, cap, "%s:%u: holds a secret but is owned by uid %u, not root or uid %u", path,
                 secret_line, (unsigned)st.st_uid, (unsigned)geteuid());
        goto out;
    }
    rc = 0;
out:
    if (rc) {
        fs_config_free(*out);
        *out = NULL;
    }
    free(text);
    close(fd);
    return rc;
}
