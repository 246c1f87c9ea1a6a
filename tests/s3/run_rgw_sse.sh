#!/usr/bin/env bash
# run_rgw_sse.sh CKPTCTL CKPTFS — --s3-sse against Ceph's RADOS Gateway, run under
# with_rgw.sh --https (RGW_*, AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY set;
# rgw.sh configures the testing KMS backend with testkey-1 and testkey-2):
#   * SSE-C over https: put, then restore (ranged, streamed GETs) bit-exact
#     and verify with the key file; a GET
#     of a stored object without the SSE-C headers is refused by RGW (HTTP
#     400); restore with another key and without the key fail with exit 3
#     and a message that says what to do; the key (raw or base64) is in no
#     output, --json included;
#   * SSE-C key files that break the rules (mode 0644, a symlink, 31 bytes)
#     are refused with exit 2 before any request;
#   * SSE over plain http: refused by RGW (rgw crypt require ssl), exit 3,
#     the message says to use https;
#   * SSE-KMS with testkey-1: put and restore bit-exact, and RGW's HEAD
#     answer names aws:kms and the key id;
#   * a bucket whose policy denies PUTs without x-amz-server-side-encryption:
#     a put without --s3-sse fails with exit 3 and "give --s3-sse", one with
#     aws:kms:testkey-1 succeeds;
#   * AES256 (SSE-S3): the put succeeds only if RGW confirms the encryption
#     (RGW 16 does not: it ignores the header, and ckptctl refuses);
#   * the V2 backend refuses --s3-sse, exit 2;
#   * a ckptfs mount with --s3-sse c:FILE: a file written into it is durable
#     (ckptctl wait), restores bit-exact with the key, and the key is in
#     neither the daemon's log, its status file nor its /proc cmdline.
# docs/S3.md, "Encryption at rest in the store", has the table this checks.
set -u
ckptctl=${1:?usage: run_rgw_sse.sh CKPTCTL CKPTFS}
ckptfs=${2:?usage: run_rgw_sse.sh CKPTCTL CKPTFS}
for v in RGW_ENDPOINT RGW_HTTPS_ENDPOINT RGW_CA_FILE RGW_BUCKET RGW_ACCESS_KEY RGW_SECRET_KEY; do
    [ -n "${!v:-}" ] || { echo "run_rgw_sse: $v is not set: run under with_rgw.sh --https" >&2; exit 2; }
done
unset CKPT_S3_ENDPOINT CKPT_S3_SIGNATURE CKPT_S3_CA_FILE CKPT_S3_SSE
tmp=$(mktemp -d)
fs_pid=""
cleanup() {
    if mountpoint -q "$tmp/mnt" 2>/dev/null; then
        timeout 30 fusermount3 -u "$tmp/mnt" || fusermount3 -uz "$tmp/mnt"
    fi
    if [ -n "$fs_pid" ]; then
        for _ in $(seq 100); do kill -0 "$fs_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$fs_pid" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
export XDG_CACHE_HOME=$tmp/cache
passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; cat "$tmp/out" 2>/dev/null; }
run=rgw-sse-$RANDOM
https=(--s3-endpoint "$RGW_HTTPS_ENDPOINT" --s3-ca-file "$RGW_CA_FILE")

(
    umask 077
    head -c 32 /dev/urandom >"$tmp/key"
    head -c 32 /dev/urandom >"$tmp/other-key"
    head -c 31 /dev/urandom >"$tmp/short-key"
    head -c 32 /dev/urandom >"$tmp/open-key"
)
chmod 644 "$tmp/open-key"
ln -s "$tmp/key" "$tmp/link-key"
key_b64=$(base64 -w0 <"$tmp/key")
mkdir -p "$tmp/src/step-1"
head -c 5000000 /dev/urandom >"$tmp/src/step-1/w.bin"
echo small >"$tmp/src/step-1/meta.txt"

# The key must be in no output of any ckptctl run below (checked at the end).
: >"$tmp/all-output"
ctl() { # OUT-FILE ckptctl-args...: runs ckptctl, output into OUT-FILE; returns its exit code
    local out=$1
    shift
    "$ckptctl" "$@" >"$out" 2>&1
    local rc=$?
    cat "$out" >>"$tmp/all-output"
    return $rc
}

same_tree() { diff -r "$tmp/src" "$1" >/dev/null 2>&1; }

# A signed request made by curl (the keys reach it on stdin, never argv):
# prints the HTTP status; the answer's head into $tmp/head, body into
# $tmp/body. With FILE, it is the request's body.
curl_signed() { # METHOD URL [FILE]
    local body=(-H 'x-amz-content-sha256: e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855')
    [ -z "${3:-}" ] || body=(-T "$3" -H "x-amz-content-sha256: $(sha256sum "$3" | cut -d' ' -f1)")
    printf 'user = "%s:%s"\n' "$RGW_ACCESS_KEY" "$RGW_SECRET_KEY" |
        curl -K - -s --max-time 20 --aws-sigv4 aws:amz:us-east-1:s3 --cacert "$RGW_CA_FILE" \
            "${body[@]}" -X "$1" -D "$tmp/head" -o "$tmp/body" -w '%{http_code}' "$2"
}

# The object names under a store prefix (ListObjectsV2 over https; the
# query is signed as written, so its '/' is written %2F).
objects_under() { # PREFIX
    curl_signed GET "$RGW_HTTPS_ENDPOINT/$RGW_BUCKET?list-type=2&prefix=${1//\//%2F}" >/dev/null
    tr '<' '\n' <"$tmp/body" | sed -n 's/^Key>//p'
}

# ---- SSE-C over https ----
store=s3://$RGW_BUCKET/$run-c
if ctl "$tmp/out" "${https[@]}" --s3-sse "c:$tmp/key" --store "$store" --job j put --step 1 \
    --json "$tmp/src" && ctl "$tmp/out" "${https[@]}" --s3-sse "c:$tmp/key" --store "$store" \
    --job j restore --step 1 --to "$tmp/dst-c" && same_tree "$tmp/dst-c"; then
    ok "SSE-C put and restore over https, bit-exact"
else
    bad "SSE-C round trip"
fi

if ctl "$tmp/out" "${https[@]}" --s3-sse "c:$tmp/key" --store "$store" --job j verify --step 1; then
    ok "SSE-C verify: $(tail -1 "$tmp/out")"
else
    bad "SSE-C verify"
fi

pack=$(objects_under "$run-c/" | grep '\.pack$' | head -1)
if [ -z "$pack" ]; then
    bad "no pack listed under $run-c/"
else
    code=$(curl_signed GET "$RGW_HTTPS_ENDPOINT/$RGW_BUCKET/$pack")
    if [ "$code" = 400 ] || [ "$code" = 403 ]; then
        ok "a GET of $pack without the SSE-C headers: RGW answers $code ($(sed -n 's/.*<Code>\([^<]*\)<.*/\1/p' "$tmp/body"))"
    else
        cp "$tmp/body" "$tmp/out"
        bad "a GET without the SSE-C headers answered $code, not a refusal"
    fi
fi

expect_refusal() { # NAME RC WORD -- ckptctl-args...
    local name=$1 want=$2 word=$3
    shift 4
    ctl "$tmp/out" "$@"
    local rc=$?
    if [ "$rc" != "$want" ]; then
        bad "$name: exit $rc, wanted $want"
    elif ! grep -qF -- "$word" "$tmp/out"; then
        bad "$name: no '$word' in the message"
    else
        ok "$name: exit $rc: $(tail -1 "$tmp/out")"
    fi
}
expect_refusal "restore with another key" 3 "the one the object was written with" -- \
    "${https[@]}" --s3-sse "c:$tmp/other-key" --store "$store" --job j restore --step 1 \
    --to "$tmp/dst-other"
expect_refusal "restore without the key" 3 "give --s3-sse c:KEY-FILE" -- \
    "${https[@]}" --store "$store" --job j restore --step 1 --to "$tmp/dst-none"
expect_refusal "key file mode 0644" 2 "chmod 600" -- \
    "${https[@]}" --s3-sse "c:$tmp/open-key" --store "$store" --job j ls
expect_refusal "key file a symlink" 2 "symlink" -- \
    "${https[@]}" --s3-sse "c:$tmp/link-key" --store "$store" --job j ls
expect_refusal "key file of 31 bytes" 2 "exactly 32 raw bytes" -- \
    "${https[@]}" --s3-sse "c:$tmp/short-key" --store "$store" --job j ls
expect_refusal "unknown --s3-sse" 2 "expected AES256" -- \
    "${https[@]}" --s3-sse "aes" --store "$store" --job j ls
expect_refusal "SSE-C over plain http" 3 "use an https endpoint" -- \
    --s3-endpoint "$RGW_ENDPOINT" --s3-sse "c:$tmp/key" --store "s3://$RGW_BUCKET/$run-http" \
    --job j put --step 1 "$tmp/src"
expect_refusal "SSE-C with --s3-signature v2" 2 "--s3-sse c (SSE-C) is refused" -- \
    --s3-endpoint "$RGW_ENDPOINT" --s3-signature v2 --s3-sse "c:$tmp/key" \
    --store "s3://$RGW_BUCKET/$run-v2" --job j ls

# ---- SSE-KMS (the testing KMS backend's testkey-1) ----
store=s3://$RGW_BUCKET/$run-kms
if ctl "$tmp/out" "${https[@]}" --s3-sse aws:kms:testkey-1 --store "$store" --job j put --step 1 \
    "$tmp/src" && ctl "$tmp/out" "${https[@]}" --store "$store" --job j restore --step 1 \
    --to "$tmp/dst-kms" && same_tree "$tmp/dst-kms"; then
    ok "SSE-KMS (testkey-1) put and restore, bit-exact"
else
    bad "SSE-KMS round trip"
fi
pack=$(objects_under "$run-kms/" | grep '\.pack$' | head -1)
code=$(curl_signed HEAD "$RGW_HTTPS_ENDPOINT/$RGW_BUCKET/$pack")
if [ "$code" = 200 ] && grep -qi '^x-amz-server-side-encryption: aws:kms' "$tmp/head" &&
    grep -qi '^x-amz-server-side-encryption-aws-kms-key-id: testkey-1' "$tmp/head"; then
    ok "RGW's HEAD of an SSE-KMS pack names aws:kms and testkey-1"
else
    cp "$tmp/head" "$tmp/out"
    bad "HEAD of the SSE-KMS pack (HTTP $code) does not name aws:kms/testkey-1"
fi

# ---- a bucket whose policy denies PUTs without x-amz-server-side-encryption ----
bucket=ckpt-enc-only-$RANDOM
cat >"$tmp/policy.json" <<EOF
{"Version": "2012-10-17", "Statement": [{"Sid": "DenyUnencrypted", "Effect": "Deny",
 "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::$bucket/*",
 "Condition": {"Null": {"s3:x-amz-server-side-encryption": "true"}}}]}
EOF
if [ "$(curl_signed PUT "$RGW_HTTPS_ENDPOINT/$bucket")" != 200 ] ||
    [ "$(curl_signed PUT "$RGW_HTTPS_ENDPOINT/$bucket?policy=" "$tmp/policy.json")" != 204 ]; then
    cp "$tmp/body" "$tmp/out"
    bad "cannot make bucket $bucket with a policy that demands encryption"
else
    expect_refusal "an unencrypted PUT into a bucket that demands encryption" 3 \
        "the bucket refused an unencrypted PUT: give --s3-sse" -- "${https[@]}" \
        --store "s3://$bucket/$run" --job j put --step 1 "$tmp/src"
    if ctl "$tmp/out" "${https[@]}" --s3-sse aws:kms:testkey-1 --store "s3://$bucket/$run" \
        --job j put --step 1 "$tmp/src"; then
        ok "the same bucket takes the step with --s3-sse aws:kms:testkey-1"
    else
        bad "an SSE-KMS put into the bucket that demands encryption"
    fi
fi

# ---- SSE-S3 (AES256): only with RGW's confirmation ----
store=s3://$RGW_BUCKET/$run-s3
if ctl "$tmp/out" "${https[@]}" --s3-sse AES256 --store "$store" --job j put --step 1 "$tmp/src"; then
    pack=$(objects_under "$run-s3/" | grep '\.pack$' | head -1)
    curl_signed HEAD "$RGW_HTTPS_ENDPOINT/$RGW_BUCKET/$pack" >/dev/null
    if grep -qi '^x-amz-server-side-encryption: AES256' "$tmp/head"; then
        ok "AES256: RGW confirms SSE-S3"
    else
        cp "$tmp/head" "$tmp/out"
        bad "AES256: the put succeeded, yet RGW's HEAD does not name AES256"
    fi
elif grep -qF "does not confirm --s3-sse AES256" "$tmp/out"; then
    ok "AES256: refused, RGW did not confirm SSE-S3: $(tail -1 "$tmp/out")"
else
    bad "AES256: failed otherwise"
fi

# ---- a ckptfs mount with SSE-C ----
store=s3://$RGW_BUCKET/$run-mount
mkdir -p "$tmp/mnt"
"$ckptfs" "${https[@]}" --s3-sse "c:$tmp/key" --store "$store" --staging "$tmp/staging" \
    --node n1 --drain 60 -f "$tmp/mnt" 2>"$tmp/fs.log" &
fs_pid=$!
for _ in $(seq 200); do [ -e "$tmp/mnt/.ckptfs/status" ] && break; sleep 0.1; done
if [ ! -e "$tmp/mnt/.ckptfs/status" ]; then
    cp "$tmp/fs.log" "$tmp/out"
    bad "ckptfs --s3-sse did not mount in 20 s"
else
    mkdir -p "$tmp/mnt/j/step-1"
    cp "$tmp/src/step-1/w.bin" "$tmp/mnt/j/step-1/w.bin"
    if ctl "$tmp/out" --mount "$tmp/mnt" --job j wait --step 1 --timeout 120; then
        ok "a file written into the SSE-C mount is durable"
    else
        bad "ckptctl wait on the SSE-C mount"
    fi
    tr '\0' ' ' <"/proc/$fs_pid/cmdline" >>"$tmp/all-output"
    cat "$tmp/mnt/.ckptfs/status" >>"$tmp/all-output"
    timeout 60 fusermount3 -u "$tmp/mnt" || bad "unmount of the SSE-C mount"
    wait "$fs_pid" || bad "ckptfs exit $?"
    fs_pid=""
    cat "$tmp/fs.log" >>"$tmp/all-output"
    if ctl "$tmp/out" "${https[@]}" --s3-sse "c:$tmp/key" --store "$store" --job j restore \
        --step 1 --to "$tmp/dst-mount" &&
        cmp -s "$tmp/src/step-1/w.bin" "$(find "$tmp/dst-mount" -name w.bin | head -1)"; then
        ok "the mount's step restores bit-exact with the key"
    else
        bad "restore of the mount's step"
    fi
fi

# ---- the key in no output ----
# The raw key is compared as bytes: a shell string drops its NUL bytes and
# trailing newlines, which can leave a pattern of a byte or two that any
# output matches.
raw_key_in() { # FILE: 0 if the key's 32 raw bytes are in it
    python3 -c 'import sys; sys.exit(0 if open(sys.argv[1], "rb").read() in open(sys.argv[2], "rb").read() else 1)' \
        "$tmp/key" "$1"
}
if grep -qF -- "$key_b64" "$tmp/all-output" || raw_key_in "$tmp/all-output"; then
    bad "the SSE-C key appears in ckptctl's output"
else
    ok "the SSE-C key is in none of $(wc -l <"$tmp/all-output") lines of output"
fi

echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
