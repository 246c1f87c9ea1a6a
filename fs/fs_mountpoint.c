/*
 * fs_mountpoint — a ckptfs already on the mountpoint, or a directory that
 * is not empty (see fs_mountpoint.h). The check and the mount are two
 * steps: two daemons started at the same instant on one mountpoint may
 * both pass it; each still holds its own staging directory alone.
 */
#include "fs_mountpoint.h"

#include <dirent.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CKPTFS_FSTYPE "fuse.ckptfs"

/* Undoes mountinfo's escapes (space, tab, newline and backslash as \ooo)
 * in place. */
static void unescape(char *s)
{
    char *out = s;
    for (; *s; s++) {
        if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
            s[3] >= '0' && s[3] <= '7') {
            *out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
            s += 3;
        } else {
            *out++ = *s;
        }
    }
    *out = '\0';
}

/* The type of the mount visible at path (the last one listed there) into
 * type[cap]; "" when path is no mountpoint. */
static void visible_mount_type(const char *path, char *type, size_t cap)
{
    type[0] = '\0';
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f)
        return;
    char *line = NULL;
    size_t len = 0;
    while (getline(&line, &len, f) > 0) {
        /* ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER */
        char *sep = strstr(line, " - ");
        char *save = NULL, *field = strtok_r(line, " ", &save);
        for (int i = 0; field && i < 4; i++)
            field = strtok_r(NULL, " ", &save);
        if (!field || !sep)
            continue;
        unescape(field);
        if (strcmp(field, path) == 0)
            snprintf(type, cap, "%.*s", (int)strcspn(sep + 3, " \n"), sep + 3);
    }
    free(line);
    fclose(f);
}

/* Entries of directory path besides "." and "..", counted up to a few. */
static int entries(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    for (struct dirent *de; d && n < 100 && (de = readdir(d));)
        n += strcmp(de->d_name, ".") != 0 && strcmp(de->d_name, "..") != 0;
    if (d)
        closedir(d);
    return n;
}

int fs_mountpoint_check(const char *mountpoint, char *msg, size_t cap)
{
    char real[PATH_MAX], type[64];
    msg[0] = '\0';
    if (!realpath(mountpoint, real))
        return 0;
    visible_mount_type(real, type, sizeof type);
    if (strcmp(type, CKPTFS_FSTYPE) == 0) {
        snprintf(msg, cap,
                 "%s already has a ckptfs mounted on it: one daemon per mountpoint; unmount it "
                 "first (fusermount3 -u %s)",
                 real, real);
        return -1;
    }
    int n = entries(real);
    if (n) {
        snprintf(msg, cap,
                 "mountpoint %s is not empty (%d%s %s): hidden while ckptfs is mounted on it", real,
                 n, n >= 100 ? " or more" : "", n == 1 ? "entry" : "entries");
        return 1;
    }
    return 0;
}
