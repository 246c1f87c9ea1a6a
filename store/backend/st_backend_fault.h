/*
 * st_backend_fault — a backend wrapper that injects faults, for tests only:
 * it widens the windows in which a crash can land (a delay before every
 * PUT) so a test can kill the daemon in the middle of an upload on purpose.
 *
 * Configured by a spec string (in the daemon, from $CKPT_FAULT, read only in
 * a -DCKPT_TEST_HOOKS=ON build: docs/BACKENDS.md), items separated by ',':
 *   "put_delay_ms=N"   sleep N ms before every PUT
 *   "get_delay_ms=N"   sleep N ms before every GET of a pack (a slow store
 *                      for reads: fetches that are still under way)
 *   "get_end_delay_ms=N"  sleep N ms after every GET of a pack has handed
 *                      its body, before it returns (a connection that ends
 *                      late: the reader has its bytes, the request is not
 *                      over)
 *   "fail_key=S"       every PUT of a key containing S fails as transient (the
 *                      caller retries forever: a node that cannot publish)
 *   "put_hold=PATH"    every PUT (or create, put_new) of a pack, or of a key
 *                      containing the "put_hold_key=S" item, waits while the
 *                      file PATH exists (polled every 10 ms), and first
 *                      creates PATH.reached: a test holds an upload under way
 *                      for as long as it needs (a lease claim between its
 *                      read and its create), then removes PATH
 *   "lose_answer=S"    the first PUT (or create) of a key containing S is
 *                      done by the store, then answered ST_ERR_TRANSIENT: an
 *                      answer lost on the way back, which a retry wrapper
 *                      above sends again (a create then meets its own object)
 *   "get_hold=PATH"    every GET of a key containing the "get_hold_key=S"
 *                      item (every key without one) waits while PATH exists,
 *                      and first creates PATH.reached: a test holds a reader
 *                      (a refresh loading a step) inside its store read,
 *                      changes the mount meanwhile, then removes PATH
 * Unknown keys are an error, so a typo does not silently test nothing. Each
 * kind of fault says once on stderr that it fired, so a test can check it did.
 *
 * Threads: after creation only the "said it fired" flags change (atomic);
 * sleeps and holds on the calling thread.
 */
#ifndef ST_BACKEND_FAULT_H
#define ST_BACKEND_FAULT_H

#include "backend/st_backend.h"

/*! Wraps *b per spec; on ST_OK *b is the wrapper and owns the old *b. */
st_err st_backend_fault_wrap(st_backend **b, const char *spec);

#endif
