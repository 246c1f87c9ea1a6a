"""report.py - turns the peer benchmark's runs (results.jsonl, one line per
run of one tool) into every figure: peers.json (per-run values, medians,
ranges and ratios to ckptfs), PNG plots, and the markdown section peers.md,
which also replaces the section between the markers
<!-- peers:begin --> and <!-- peers:end --> of --doc (appended if absent).

  report.py --results FILE --machine FILE --out DIR --command CMD [--doc FILE]

Per run, a save measure is the median over the run's saves; the table shows
the median over repetitions and [min–max]; a ratio is tool / ckptfs of the
same repetition (same server, scenario, size), median and [min–max] over
repetitions. Runs that failed are listed, not averaged.
"""
import argparse
import json
import os
import re
import statistics
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

TOOLS = ["ckptfs", "ckptfs-cold", "s3fs", "s3fs-1put", "rclone-writes", "rclone-full", "aws-cp", "aws-cp-1put",
         "local"]
MIB = float(1 << 20)

# measure key -> (label, unit, per-run value from a record or None)
def per_ckpt(rec, n):
    return n / max(1, len(rec["stall_s"]))


MEASURES = [
    ("stall", "training stall (s)", lambda r: statistics.median(r["stall_s"])),
    ("durable", "save start → in the store (s)",
     lambda r: statistics.median(r["durable_s"]) if r["durable_s"] else None),
    ("resume", "new node: mount → torch.load done (s)", lambda r: r["resume_s"]),
    ("stored", "stored per checkpoint (MiB)",
     lambda r: per_ckpt(r, r["stored_bytes"]) / MIB if r["tool"] != "local" else None),
    ("puts", "PUT+POST per checkpoint",
     lambda r: per_ckpt(r, r["save_requests"]["PUT"] + r["save_requests"]["POST"])
     if r["tool"] != "local" else None),
    ("save_other", "GET+HEAD per checkpoint (saving)",
     lambda r: per_ckpt(r, r["save_requests"]["GET"] + r["save_requests"]["HEAD"])
     if r["tool"] != "local" else None),
    ("resume_gets", "GET+HEAD to resume",
     lambda r: r["resume_requests"]["GET"] + r["resume_requests"]["HEAD"]
     if r["tool"] != "local" else None),
    ("rss", "daemon/client peak RSS (MiB)",
     lambda r: max(r["daemon_save"].get("rss_kib", 0), r["daemon_resume"].get("rss_kib", 0)) / 1024
     if r["tool"] != "local" else None),
    ("cpu", "tool CPU s per checkpoint (save)",
     lambda r: per_ckpt(r, r["daemon_save"].get("cpu_s", 0)) if r["tool"] != "local" else None),
    ("cpu_resume", "tool CPU s (resume)",
     lambda r: r["daemon_resume"].get("cpu_s", 0) if r["tool"] != "local" else None),
    ("server_cpu", "server CPU s per checkpoint (save)",
     lambda r: per_ckpt(r, r["server_cpu_save_s"]) if r["tool"] != "local" else None),
]


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def summarize(runs):
    """{(server, scenario, size): {tool: {measure: {median, min, max, values,
    ratio: {median, min, max}}}}}"""
    groups = {}
    for r in runs:
        if "error" in r:
            continue
        groups.setdefault((r["server"], r["scenario"], r["size_mib"]), []).append(r)
    out = {}
    for key, rs in groups.items():
        by_rep = {}
        for r in rs:
            by_rep.setdefault(r["rep"], {})[r["tool"]] = r
        res = {}
        for tool in TOOLS:
            mine = [r for r in rs if r["tool"] == tool]
            if not mine:
                continue
            res[tool] = {"reps": len(mine), "ckpt_mib": mine[0]["ckpt_bytes"] / MIB,
                         "saves": mine[0].get("saves", len(mine[0]["stall_s"]))}
            for m, _, fn in MEASURES:
                vals = [v for v in (fn(r) for r in mine) if v is not None]
                if not vals:
                    continue
                e = {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
                     "values": vals}
                ratios = []
                for rep, tools in by_rep.items():
                    if tool in tools and "ckptfs" in tools:
                        a, b = fn(tools[tool]), fn(tools["ckptfs"])
                        if a is not None and b:
                            ratios.append(a / b)
                if ratios:
                    e["ratio"] = {"median": statistics.median(ratios), "min": min(ratios),
                                  "max": max(ratios)}
                res[tool][m] = e
        out[key] = res
    return out


def cell(e, digits=2, ratio=True):
    if e is None:
        return "–"
    s = "%.*f" % (digits, e["median"])
    if e["max"] > e["min"] and len(e["values"]) > 1:
        s += " [%.*f–%.*f]" % (digits, e["min"], digits, e["max"])
    if ratio and "ratio" in e:
        s += " (**%.2f×**)" % e["ratio"]["median"]
    return s


def main_table(res, keys):
    head = "| tool | " + " | ".join(label for k, label, _ in MEASURES if k in keys) + " |"
    lines = [head, "|" + "---|" * (len(keys) + 1)]
    for tool in TOOLS:
        if tool not in res:
            continue
        row = [tool]
        for k, _, _ in MEASURES:
            if k in keys:
                digits = 0 if k in ("stored", "rss", "puts", "save_other", "resume_gets") else 2
                if k == "stored":
                    digits = 1
                row.append(cell(res[tool].get(k), digits, ratio=tool != "ckptfs"))
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


PLOT_MEASURES = ("stall", "durable", "resume", "stored", "puts", "rss", "cpu", "server_cpu")
MACHINE_NOTE = ["busy machine"]  # main() replaces it from machine.txt's load average


def machine_note(machine):
    """"busy machine" when a load average machine.txt records (before or
    after a run) was above 2 (the 2 vCPUs were shared), else "quiet
    machine"."""
    loads = [float(x) for x in re.findall(r"load average (?:before|after): ([0-9.]+)", machine)]
    return "quiet machine" if loads and max(loads) <= 2 else "busy machine"


def bars(summary, keys, path, title):
    """One subplot per measure; bars per tool, one colour per (server,
    scenario, size) group in keys."""
    measures = [m for m in MEASURES if m[0] in PLOT_MEASURES]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    width = 0.8 / max(1, len(keys))
    for ax, (m, label, _) in zip(axes.flat, measures):
        for gi, key in enumerate(keys):
            res = summary[key]
            xs, ys, lo, hi = [], [], [], []
            for ti, tool in enumerate(TOOLS):
                e = res.get(tool, {}).get(m)
                if e is None:
                    continue
                xs.append(ti + gi * width)
                ys.append(e["median"])
                lo.append(e["median"] - e["min"])
                hi.append(e["max"] - e["median"])
            ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2,
                   label="%s %s %d MiB" % key)
        ax.set_title(label, fontsize=10)
        ax.set_xticks([i + width * (len(keys) - 1) / 2 for i in range(len(TOOLS))])
        ax.set_xticklabels(TOOLS, rotation=30, fontsize=8)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(title + " (median, whiskers: min–max over repetitions; %s)" % MACHINE_NOTE[0])
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def size_label(mib):
    return "%d GiB" % (mib >> 10) if mib >= 1024 and mib % 1024 == 0 else "%d MiB" % mib


def growth(summary, server, scenario, path):
    """Every plotted measure against the checkpoint size (256 MiB, 1 GiB,
    4 GiB in the default plan), one line per tool."""
    sizes = sorted(s for (sv, sc, s) in summary if sv == server and sc == scenario)
    measures = [m for m in MEASURES if m[0] in PLOT_MEASURES]
    fig, axes = plt.subplots(2, 4, figsize=(18, 8))
    for ax, (m, label, _) in zip(axes.flat, measures):
        for tool in TOOLS:
            pts = [(s, summary[(server, scenario, s)][tool][m]["median"]) for s in sizes
                   if m in summary[(server, scenario, s)].get(tool, {})]
            if pts:
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=tool)
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes)
        ax.set_xticklabels([size_label(s) for s in sizes])
        ax.set_xlabel("checkpoint size")
        ax.set_title(label, fontsize=10)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("%s, %s: growth with checkpoint size (median over repetitions; %s)"
                 % (server, scenario, MACHINE_NOTE[0]))
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)


def section(summary, runs, machine, command, out):
    L = ["<!-- peers:begin -->", "## Peers: ckptfs against s3fs, rclone mount and save-then-upload",
         "", "Generated by `tests/bench/peers/run.sh` (report.py); every figure is in "
         "[peers/peers.json](peers/peers.json), every run in "
         "[peers/results.jsonl](peers/results.jsonl).", "",
         "**Figures from a %s** (load average before the run in \"Machine and run\"; "
         "a busy one is shared by several engineers' 2 vCPUs): absolute times are noisy; "
         "the ratios to ckptfs from the same repetition are what to read." % MACHINE_NOTE[0], "", "Machine and run:", "", "```"]
    L += machine.strip().splitlines()
    L += ["```", "", "Command: `%s`" % command, ""]
    L += [METHOD, ""]
    failed = [r for r in runs if "error" in r]
    keys = sorted(summary, key=lambda k: (k[0] != "s3rver", k[1] != "full", k[2] != 256, k))
    for key in keys:
        res = summary[key]
        reps = max(v["reps"] for v in res.values())
        ck = res.get("ckptfs", next(iter(res.values())))["ckpt_mib"]
        saves = res.get("ckptfs", next(iter(res.values())))["saves"]
        L += ["### %s, %s, %d MiB (%.1f MiB per checkpoint), %d repetition%s of %d save%s" %
              (key[0], key[1], key[2], ck, reps, "" if reps == 1 else "s", saves,
               "" if saves == 1 else "s"), "",
              "Times in seconds; median [min–max] over repetitions; (**ratio**) = tool / "
              "ckptfs of the same repetition, median.", "",
              main_table(res, ["stall", "durable", "resume", "stored", "puts", "save_other"]),
              "", main_table(res, ["resume_gets", "rss", "cpu", "cpu_resume", "server_cpu"]), ""]
    L += ["### Plots", ""]
    for name, text in PLOTS:
        if os.path.exists(os.path.join(out, name)):
            L += ["![%s](peers/%s)" % (text, name), ""]
    if failed:
        L += ["### Runs that failed", ""]
        L += ["* %s %s %d MiB rep %d %s: %s" % (r["server"], r["scenario"], r["size_mib"],
                                               r["rep"], r["tool"], r["error"][:300])
              for r in failed]
        L += [""]
    L += ["<!-- peers:end -->", ""]
    return "\n".join(L)


PLOTS = []

METHOD = """How it runs (tests/bench/peers/: run.sh starts the servers, peers_bench.py
the runs, tools.py the tools, workloads.py the checkpoints, s3check.py the
store checks, report.py this section):

* **Workloads**, real PyTorch (Debian's 1.13): a transformer (embedding,
  encoder layers, final norm; the widest of 2048..128 that leaves at least
  4 layers, 12 for finetune, in three quarters of the parameters, the
  vocabulary sized to the rest, so a checkpoint of N MiB saves N MiB, +0.5%
  at most from 64 MiB up; the "MiB per checkpoint" in each heading is the
  measured size) with its AdamW state after one step, saved as
  `torch.save({"step", "model", "optim"}, ckpt-{step:06d}.pt)` every 10
  steps, as many saves per run as the plan says (each heading). `full`: fp32, every value changes
  between saves; `bf16`: weights and AdamW state in bf16; `finetune`: frozen
  backbone, only the last two layers and the norm train (only they and
  their AdamW state change); `ddp`: 4 forked rank processes save the same
  state at once as `step-N/rank{r}.pt` (a quarter of the size each), then
  the empty marker `.ckpt-complete` (ckptfs's explicit completion,
  docs/STEPS.md R1); `dcp`: a 4-rank torch.distributed.checkpoint step, 4
  processes of one gloo group each holding a quarter of every tensor's rows
  as a ShardedTensor, `save_state_dict` with `FileSystemWriter(...,
  single_file_per_rank=True)` writing `step-N/__R_0.distcp` and rank 0's
  `.metadata` (through `.metadata.tmp` and a rename; every file fsynced,
  DCP's default); its resume is `load_state_dict` of the whole step in one
  process. Debian's 1.13 has DCP as `torch.distributed._shard.checkpoint`,
  whose import fails on Python 3.11 (a dataclass default that 3.11 refuses,
  fixed upstream in pytorch/pytorch#91795); workloads.py makes that one
  class hashable for the import.
* **Tools**, each against the same server through one counting proxy
  (tests/s3/faultproxy.py with no faults: it counts requests per method at
  the server's door; all tools pay its copy), every run in a fresh bucket
  prefix with fresh cache/staging directories, the order rotated by one per
  repetition: `ckptfs` (staging on the disk, `--store s3://ckpt-test/PREFIX`);
  `s3fs` 1.90 with the large-file options of its manual (`man s3fs`:
  `multipart_size=64` MB parts instead of 10, `parallel_count=8` instead of 5,
  `max_dirty_data=-1`, `use_cache=DIR`), path-style; `rclone mount`
  1.60 with `--vfs-cache-mode writes` and `full`, rclone's defaults
  otherwise but for `--vfs-write-back 1s` (the delay from a file's close
  to its upload; rclone's default is 5 s, the CI smoke's 100 ms; machine.txt
  records the run's): a shorter delay only brings rclone's time to durable
  forward, by ~4 s per save, and the default's idle waits would cost the
  full run ~10 of its 30 minutes;
  `aws-cp`: torch.save to the local disk, then `aws s3 cp` (awscli 2.9,
  its defaults: 8 MiB parts, 10 in flight; the trainer waits for both);
  `s3fs-1put` and `aws-cp-1put` (when `--tools` names them): the same
  with one PUT per file (`-o nomultipart`; `multipart_threshold = 5GB`),
  as a user would set them where completing a multipart upload costs;
  `local`: torch.save to the local disk only, the floor.
* **Measures**: *stall* = the wall time the trainer waits (torch.save; for
  aws-cp torch.save + `aws s3 cp`), median of the run's saves. *Durable* =
  from the save's start until the store itself has it: a HEAD of every file
  with its size (SigV4, straight to the server), for ckptfs `ckptctl latest`
  (which reads the store's catalog) naming the step plus a listing of the
  prefix; polled every 0.2 s, and the next save starts only then. *Resume* =
  a new node: from starting a fresh mount (fresh cache/staging; aws-cp: `aws
  s3 ls` + `aws s3 cp` of the newest) until torch.load of every file of the
  newest step (dcp: DCP's load of the step) has returned; then (untimed) the bytes read through the mount
  are compared by SHA-256 with the same save replayed into /dev/shm — a
  mismatch fails the run. *Stored* = bytes listed under the run's prefix
  after its saves, per checkpoint. *Requests* = counted by the proxy during
  the save phase (until the unmount, drain included) per checkpoint, and
  during the resume. *RSS* = the daemon's VmHWM (aws-cp: the largest `aws`
  process); *CPU* = the daemon's (or the `aws` processes') user+system
  seconds, and the S3 server's, which shares the 2 vCPUs.
* SigV4 for the checks as AWS documents it ("Signature Version 4 signing
  process": canonical request, string to sign, HMAC-SHA256 key chain
  date/region/service/aws4_request), with `UNSIGNED-PAYLOAD`, which
  s3rver and RGW accept. Credentials reach the tools through the
  environment (ckptfs, rclone `env_auth`, aws) or a mode-600 file (s3fs
  `passwd_file`), never argv."""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--results", required=True)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", required=True)
    ap.add_argument("--doc")
    a = ap.parse_args()
    runs = load(a.results)
    summary = summarize(runs)
    MACHINE_NOTE[0] = machine_note(open(a.machine).read())
    with open(os.path.join(a.out, "peers.json"), "w") as f:
        json.dump({"machine": open(a.machine).read(), "command": a.command, "runs": runs,
                   "summary": [{"server": k[0], "scenario": k[1], "size_mib": k[2], "tools": v}
                               for k, v in sorted(summary.items())]}, f, indent=1)
    for server in sorted({k[0] for k in summary}):
        for size in sorted({k[2] for k in summary if k[0] == server}, reverse=True):
            keys = sorted(k for k in summary if k[0] == server and k[2] == size)
            name = "peers_%s_%d_bars.png" % (server, size)
            bars(summary, keys, os.path.join(a.out, name),
                 "%s: every scenario at %d MiB" % (server, size))
            PLOTS.append((name, "%s, %d MiB: bars per tool per measure" % (server, size)))
        for scenario in sorted({k[1] for k in summary if k[0] == server}):
            if len([k for k in summary if k[:2] == (server, scenario)]) > 1:
                name = "peers_%s_%s_growth.png" % (server, scenario)
                growth(summary, server, scenario, os.path.join(a.out, name))
                PLOTS.append((name, "%s %s: growth with size" % (server, scenario)))
    text = section(summary, runs, open(a.machine).read(), a.command, a.out)
    with open(os.path.join(a.out, "peers.md"), "w") as f:
        f.write(text)
    if a.doc:
        doc = open(a.doc).read()
        b, e = doc.find("<!-- peers:begin -->"), doc.find("<!-- peers:end -->")
        if b >= 0 and e > b:
            doc = doc[:b] + text + doc[e + len("<!-- peers:end -->\n"):]
        else:
            doc = doc.rstrip("\n") + "\n\n" + text
        with open(a.doc, "w") as f:
            f.write(doc)
    failed = sum("error" in r for r in runs)
    print("report: %d runs, %d failed; %s" % (len(runs), failed, os.path.join(a.out, "peers.md")),
          file=sys.stderr)


if __name__ == "__main__":
    main()
