#!/usr/bin/env bash
# The main job, end to end, on the embedded default store (until the FUSE
# mount lands, through ckptctl): train a tiny model with real PyTorch that
# checkpoints every 2 steps, store the checkpoint directory as a step,
# restore it elsewhere, and check that every byte came back.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
"$here/tools/bootstrap.sh" "$here/build"
ckptctl="$here/build/tools/ckptctl"
export CKPT_JOB=${CKPT_JOB:-demo}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

echo "== training a tiny model (PyTorch $(/usr/bin/python3 -c 'import torch; print(torch.__version__)')), checkpoint every 2 steps"
/usr/bin/python3 "$here/tests/integration/torch_ckpt.py" train "$work/ckpts" --steps 6 --every 2 >/dev/null
ls -l "$work/ckpts"

# The next free step number in this job, so the demo can run again and again.
last=$("$ckptctl" --json ls | /usr/bin/python3 -c 'import json,sys; s=json.load(sys.stdin); print(s[-1]["step"] if s else 0)')
step=$((last + 1))
echo "== storing it as step $step of job $CKPT_JOB in ${CKPT_STORE:-the default store}"
"$ckptctl" put --step "$step" "$work/ckpts"

echo "== restoring step $step into a fresh directory"
"$ckptctl" get --step "$step" --to "$work/restored"
(cd "$work/ckpts" && sha256sum * | sort) >"$work/a"
(cd "$work/restored" && sha256sum * | sort) >"$work/b"
if cmp -s "$work/a" "$work/b"; then
    echo "== all $(wc -l <"$work/a") files restored bit-exact (sha256 identical)"
else
    echo "== MISMATCH between stored and restored files" >&2
    diff "$work/a" "$work/b" >&2
    exit 1
fi
echo "== steps of job $CKPT_JOB now in the store:"
"$ckptctl" ls
