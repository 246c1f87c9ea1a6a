#!/usr/bin/env bash
# run_rgw_faults.sh DRIVER — the Ceph RGW fault tests, one after the other
# on the one cluster of the with_rgw.sh this runs under (RGW_DIR set):
#   1. run_outage.sh DRIVER 20 rgw   radosgw stopped for 20 s mid-uploads
#   2. run_outage.sh DRIVER 20 osd   the only OSD stopped for 20 s
#   3. test_mount_rgw_faults.py      the same faults under a ckptfs mount
#                                    (needs CKPTFS and CKPTCTL)
# Each part leaves the cluster whole (every daemon running) behind it.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
driver=${1:?usage: run_rgw_faults.sh S3_FAULT_DRIVER}
[ -n "${RGW_DIR:-}" ] || { echo "run_rgw_faults: run it under tests/s3/with_rgw.sh" >&2; exit 2; }
py=/usr/bin/python3
[ -x "$py" ] || { echo "run_rgw_faults: $py not found" >&2; exit 2; }
for what in rgw osd; do
    t0=$SECONDS
    bash "$here/run_outage.sh" "$driver" 20 "$what"
    echo "run_rgw_faults: $what outage passed in $((SECONDS - t0)) s"
done
t0=$SECONDS
"$py" "$here/test_mount_rgw_faults.py"
echo "run_rgw_faults: mount faults passed in $((SECONDS - t0)) s"
