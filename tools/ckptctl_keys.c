/*
 * ckptctl_keys — the verb over the client-side encryption key file:
 * keygen (docs/ENCRYPTION.md, "Cipher and keys" and "Rotation"). The key's
 * bytes never reach this file: the facade writes them and hands back the
 * key id, which is all that is printed. Single-threaded.
 */
#include <stdio.h>

#include "ckptctl.h"
#include "ckptctl_cli.h"

int run_keygen(cli *c, st_store *s)
{
    (void)s;
    if (c->argc != 1) {
        fprintf(stderr, "ckptctl keygen: %s (see ckptctl keygen --help)\n",
                c->argc ? "one FILE only" : "no key file: pass FILE");
        return EXIT_USAGE;
    }
    const char *path = c->argv[0];
    char key_id[ST_KEY_ID_HEX_LEN];
    size_t nkeys = 0;
    st_err e = st_store_keygen(path, c->append, key_id, &nkeys);
    if (e)
        return fail(e);
    if (!c->quiet)
        printf("%s: new key id %s seals from now on (%zu key%s in the file)\n", path, key_id, nkeys,
               nkeys == 1 ? "" : "s");
    return EXIT_OK;
}
