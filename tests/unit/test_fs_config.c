/*
 * Unit tests of the daemon's option table, configuration file and log
 * escaping (fs/fs_options.c, fs/fs_config.c, fs/fs_log.c): every key of the
 * file is a long option, values are checked, errors name file and line, a
 * secret is neither echoed nor accepted from a file others can read, and a
 * logged name cannot split a line.
 */
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs_config.h"
#include "fs_log.h"
#include "fs_options.h"
#include "ut.h"

/* Parses TEXT as the file "t.conf"; returns 0/-1 and leaves the error in why. */
static int parse(const char *text, fs_settings *s, fs_config **c, char *why, size_t cap)
{
    unsigned secret_line;
    fs_settings_init(s);
    return fs_config_parse("t.conf", text, strlen(text), s, &secret_line, c, why, cap);
}

static void test_values(void)
{
    fs_settings s;
    fs_config *c;
    char why[512];
    CHECK(parse("# a comment\n"
                "   # an indented comment\n"
                "\n"
                "store = file:///srv/ckpt\n"
                "staging=/var/lib/ckptfs/a\r\n"
                "  step-pattern =  step_(\\d+)#x  \n"
                "staging-cap = 2G\n"
                "upload-threads = 8\n"
                "drain = 0\n"
                "gc-keep-last = 3\n"
                "log-level = debug\n"
                "fuse-options = allow_other\n"
                "mountpoint = /mnt/ckpt",
                &s, &c, why, sizeof why) == 0);
    CHECK(strcmp(s.store, "file:///srv/ckpt") == 0);
    CHECK(strcmp(s.staging, "/var/lib/ckptfs/a") == 0);
    CHECK(strcmp(s.vo.step_pattern, "step_(\\d+)#x") == 0); /* '#' inside a value is kept */
    CHECK(s.vo.staging_cap == 2ull << 30);
    CHECK(s.vo.upload_threads == 8);
    CHECK(s.vo.drain_seconds == 0);
    CHECK(s.vo.gc_keep_last == 3 && s.vo.gc_enabled);
    CHECK(s.log_level == FS_LOG_DEBUG);
    CHECK(s.fuse_opts && strcmp(s.fuse_opts, "allow_other") == 0);
    CHECK(strcmp(s.mountpoint, "/mnt/ckpt") == 0);
    fs_config_free(c);
    fs_settings_free(&s);
}

/* Each bad file and the error it must give (a substring). */
static void test_errors(void)
{
    static const struct {
        const char *text, *want;
    } cases[] = {
        {"store = x\nbogus = 1\n", "t.conf:2: unknown key 'bogus'"},
        {"config = other.conf\n", "t.conf:1: unknown key 'config'"},
        {"\n\nstore file:///x\n", "t.conf:3: expected 'key = value'"},
        {"store =\n", "t.conf:1: store wants a non-empty value"},
        {"staging-cap = 12Q\n", "t.conf:1: staging-cap wants a size in bytes"},
        {"staging-cap = 99999999999T\n", "staging-cap wants a size"},
        {"staging-cap = 1 K\n", "staging-cap wants a size"},
        {"upload-threads = 33\n", "t.conf:1: upload-threads wants a whole number 1..32, got '33'"},
        {"gc-keep-last = -1\n", "gc-keep-last wants a whole number >= 1"},
        {"gc-grace = nan\n", "gc-grace wants a number of seconds > 0"},
        {"refresh = 0\n", "refresh wants a number of seconds > 0"},
        {"drain = -1\n", "drain wants a number of seconds >= 0"},
        {"log-level = loud\n", "log-level wants error, warn, info or debug, got 'loud'"},
        {"node = a\nnode = b\n", "t.conf:2: 'node' is set twice (first on line 1)"},
        {"st\x1bore = x\n", "unknown key 'st\\x1bore'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fs_settings s;
        fs_config *c = NULL;
        char why[512] = "";
        int rc = parse(cases[i].text, &s, &c, why, sizeof why);
        CHECK(rc == -1 && c == NULL);
        if (!strstr(why, cases[i].want)) {
            fprintf(stderr, "case %zu: got \"%s\", want \"%s\"\n", i, why, cases[i].want);
            CHECK(0);
        }
        fs_settings_free(&s);
    }
    /* A NUL byte: not a text file. */
    fs_settings s;
    fs_config *c;
    char why[256];
    unsigned secret_line;
    fs_settings_init(&s);
    CHECK(fs_config_parse("t.conf", "a\0b", 3, &s, &secret_line, &c, why, sizeof why) == -1);
    CHECK(strstr(why, "NUL") != NULL);
}

/* Every row is a long option and (but --config) a file key, with help. */
static void test_table(void)
{
    char shortopts[16];
    static const struct option extra[] = {{"help", no_argument, NULL, 'h'}};
    struct option *l = fs_options_getopt(extra, 1, "hfd", shortopts, sizeof shortopts);
    CHECK(l != NULL);
    CHECK(strcmp(shortopts, "hfdo:") == 0);
    size_t n = 0;
    while (l && l[n].name)
        n++;
    size_t secrets = 0;
    for (size_t i = 0; i < fs_option_count; i++) {
        const fs_option *o = &fs_option_table[i];
        CHECK(o->help && *o->help && o->metavar);
        CHECK(fs_option_find(o->name) == o);
        CHECK(fs_option_for_getopt(FS_OPT_VAL_BASE + (int)i) == o);
        secrets += (o->flags & FS_OPT_SECRET) != 0;
    }
    CHECK(n == fs_option_count - secrets + 1);
    CHECK(fs_option_for_getopt('o') == fs_option_find("fuse-options"));
    /* Secrets never reach getopt: not on the command line. */
    for (size_t i = 0; l && l[i].name; i++)
        CHECK(strncmp(l[i].name, "aws-", 4) != 0);
    free(l);
}

/* The value of a secret is never in an error message. */
static void test_secret_not_echoed(void)
{
    fs_settings s;
    fs_config *c;
    char why[512];
    unsigned secret_line;
    const char *text = "store = s3://b/p\naws-access-key-id = AKID\naws-secret-access-key = \n";
    fs_settings_init(&s);
    CHECK(fs_config_parse("t.conf", text, strlen(text), &s, &secret_line, &c, why, sizeof why) ==
          -1);
    CHECK(strstr(why, "t.conf:3: aws-secret-access-key wants") != NULL);
    text = "aws-secret-access-key = s3cr3t\n";
    CHECK(fs_config_parse("t.conf", text, strlen(text), &s, &secret_line, &c, why, sizeof why) ==
          0);
    CHECK(secret_line == 1 && strcmp(s.aws_secret_access_key, "s3cr3t") == 0);
    fs_config_free(c);
    fs_settings_free(&s);
}

/* Writes TEXT to DIR/NAME with MODE; returns the path (static buffer). */
static const char *write_file(const char *dir, const char *name, const char *text, mode_t mode)
{
    static char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    ut_write_text(path, text);
    CHECK(chmod(path, mode) == 0);
    return path;
}

/* fs_config_load: a secret in a group- or world-readable file is refused
 * (without its value in the message); mode 0600 is accepted; a file without
 * secrets may be world-readable. */
static void test_load_modes(void)
{
    char dir[] = "/tmp/test_fs_config.XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    const char *secret = "store = s3://b/p\naws-secret-access-key = TOPSECRET\n";
    char why[1024];
    fs_settings s;
    fs_config *c;
    static const mode_t refused[] = {0644, 0640, 0604, 0660};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        const char *p = write_file(dir, "s.conf", secret, refused[i]);
        fs_settings_init(&s);
        CHECK(fs_config_load(p, &s, &c, why, sizeof why) == -1 && c == NULL);
        CHECK(strstr(why, "s.conf:2: holds a secret but is readable by group or others") != NULL);
        CHECK(strstr(why, "TOPSECRET") == NULL);
        fs_settings_free(&s);
    }
    const char *p = write_file(dir, "s.conf", secret, 0600);
    fs_settings_init(&s);
    CHECK(fs_config_load(p, &s, &c, why, sizeof why) == 0);
    CHECK(s.aws_secret_access_key && strcmp(s.aws_secret_access_key, "TOPSECRET") == 0);
    fs_config_free(c);
    fs_settings_free(&s);

    p = write_file(dir, "plain.conf", "store = file:///x\n", 0644);
    fs_settings_init(&s);
    CHECK(fs_config_load(p, &s, &c, why, sizeof why) == 0);
    fs_config_free(c);
    fs_settings_free(&s);

    fs_settings_init(&s);
    CHECK(fs_config_load("/nonexistent/ckptfs.conf", &s, &c, why, sizeof why) == -1);
    CHECK(strstr(why, "/nonexistent/ckptfs.conf: No such file") != NULL);
    CHECK(fs_config_load(dir, &s, &c, why, sizeof why) == -1);
    CHECK(strstr(why, "not a regular file") != NULL);
    ut_rmtree(dir);
}

/* A name with a newline, a tab or an escape sequence stays on one line;
 * escaping is idempotent (an escaped message passes unchanged, so a layer
 * below that escapes names too does not double them); long text is cut
 * within the buffer with "...". */
static void test_log_escape(void)
{
    char out[64], again[64];
    fs_log_escape("job/ckpt\n<3>forged \x1b[31m\t\r\\", out, sizeof out);
    CHECK(strcmp(out, "job/ckpt\\n<3>forged \\x1b[31m\\t\\r\\") == 0);
    CHECK(strchr(out, '\n') == NULL);
    fs_log_escape(out, again, sizeof again);
    CHECK(strcmp(out, again) == 0);
    fs_log_escape("caf\xc3\xa9", out, sizeof out); /* UTF-8 is kept */
    CHECK(strcmp(out, "caf\xc3\xa9") == 0);
    char small[8];
    size_t n = fs_log_escape("0123456789", small, sizeof small);
    CHECK(n == 7 && strcmp(small, "0123...") == 0);
    n = fs_log_escape("\n\n\n\n", small, sizeof small);
    CHECK(strcmp(small, "\\n\\n...") == 0 && n == 7);
    CHECK(fs_log_escape("x", small, 1) == 0 && small[0] == '\0');
}

/* fs_log_write under journald: one "<N>" line per event, below the
 * threshold dropped. Stderr goes to a file for the test. */
static void test_log_lines(void)
{
    char path[] = "/tmp/test_fs_log.XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    setenv("JOURNAL_STREAM", "8:1234", 1);
    fs_log_setup(FS_LOG_WARN, FS_LOG_STDERR);
    fs_log_write(FS_LOG_INFO, "dropped");
    fs_log_vfs(NULL, 1, "a/b\nc looks cut short");
    fs_log_vfs(NULL, 2, "boom");
    unsetenv("JOURNAL_STREAM");
    fs_log_setup(FS_LOG_DEBUG, FS_LOG_STDERR); /* stderr is a file: prefixed */
    fs_logf(FS_LOG_DEBUG, "n=%d", 3);
    dup2(saved, STDERR_FILENO);
    close(saved);
    char buf[512] = "";
    ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
    CHECK(got > 0);
    CHECK(strcmp(buf, "<4>warning: a/b\\nc looks cut short\n"
                      "<3>error: boom\n"
                      "<7>ckptfs: debug: n=3\n") == 0);
    close(fd);
    unlink(path);
}

/* --help lists every option but the secret ones, in lines that fit an
 * 80-column terminal (before the help text was wrapped, eight did not). */
static void test_usage_fits(void)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    CHECK(out != NULL);
    if (!out)
        return;
    fs_options_usage(out);
    fclose(out);
    for (const char *line = text; *line; line += strcspn(line, "\n") + 1) {
        size_t len = strcspn(line, "\n");
        if (len >= 80)
            fprintf(stderr, "  too long: %.*s\n", (int)len, line);
        CHECK(len < 80);
    }
    for (size_t i = 0; i < fs_option_count; i++) {
        char head[64];
        snprintf(head, sizeof head, "\n  --%s ", fs_option_table[i].name);
        int secret = (fs_option_table[i].flags & FS_OPT_SECRET) != 0;
        CHECK((strstr(text, head + (i == 0)) != NULL) == !secret);
    }
    free(text);
}

/* The peer TLS options (docs/PEERS.md, "Transport security"): file keys
 * and long options both, the https:// scheme kept in --peers as given. */
static void test_peer_tls_options(void)
{
    fs_settings s;
    fs_config *c;
    char why[512];
    CHECK(parse("peers = https://10.0.0.2:7070,10.0.0.3:7070\n"
                "peer-tls-cert = /etc/ckptfs/peer.pem\n"
                "peer-tls-key = /etc/ckptfs/peer.key\n"
                "peer-ca-file = /etc/ckptfs/ca.pem\n",
                &s, &c, why, sizeof why) == 0);
    CHECK(strcmp(s.vo.peers, "https://10.0.0.2:7070,10.0.0.3:7070") == 0);
    CHECK(strcmp(s.vo.peer_tls_cert, "/etc/ckptfs/peer.pem") == 0);
    CHECK(strcmp(s.vo.peer_tls_key, "/etc/ckptfs/peer.key") == 0);
    CHECK(strcmp(s.vo.peer_ca_file, "/etc/ckptfs/ca.pem") == 0);
    fs_config_free(c);
    fs_settings_free(&s);
    const char *names[] = {"peer-tls-cert", "peer-tls-key", "peer-ca-file"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const fs_option *o = fs_option_find(names[i]);
        CHECK(o && !(o->flags & (FS_OPT_SECRET | FS_OPT_CLI_ONLY)) && !strcmp(o->metavar, "FILE"));
    }
}

int main(void)
{
    RUN(test_values);
    RUN(test_errors);
    RUN(test_table);
    RUN(test_usage_fits);
    RUN(test_secret_not_echoed);
    RUN(test_peer_tls_options);
    RUN(test_load_modes);
    RUN(test_log_escape);
    RUN(test_log_lines);
    return ut_finish();
}
