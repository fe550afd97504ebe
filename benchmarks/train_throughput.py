"""Training throughput of the CPU trainer against this CPU's matmul peak (issue 41).

    python benchmarks/train_throughput.py [--baseline REV] [--json OUT.json] [--tokens 5e4] [--quick]

One run prints, on the machine present:

1. the machine: CPU, torch, its CPU capability, whether it multiplies bf16 matrices in hardware;
2. peaks: fp32 and bf16 matmul GFLOP/s at the models' FFN shapes (8,192 x 128 @ 128 x 512 for
   ILR-small, 8,192 x 64 @ 64 x 256 for the d-64 model) on 1 and 2 threads. Without bf16 matrices
   bf16 is emulated (tens of times slower; the trainer refuses it) and is printed as such;
3. the auto attention choice (``--attention auto``, measured afresh at each row's shape);
4. rows: ILR-small (d 128, 4 layers, 4 heads, vocab 1,024, context 1,024, batch 8), ILR-small on
   the byte protocol (vocab 256, context 128, batch 16) and the d-64 model (d 64, 2 heads, ffn 256,
   vocab 1,024, context 256, batch 32), maps 1,1,1,1 and 4,2,1,1, 1 and 2 threads, trained by
   ``searchmaps.train.train`` with its automatic choices (precision, compile, attention): tokens/s
   (validation excluded), GFLOP/s (``searchmaps.flops``: training = 3 x forward, causal attention
   counted in full), the share of the peak of the row's precision at its model's FFN shape and
   thread count (the byte protocol's rows use ILR-small's), and the compile's seconds (a short
   first training less what its tokens take at the timed rate; a shape compiled by an earlier row
   of the process shows about 0, as in a search worker). With ``--baseline REV`` the same rows
   trained by commit REV's trainer (a temporary git worktree, its own process) and this commit's
   tokens/s as a ratio to it;
5. ablations, on the d-64 row and ILR-small at context 1,024 (map 1,1,1,1, 1 thread): the default
   trainer, then each technique off in turn, as a ratio to the default:
   - compile off: the decoder layers eager;
   - attention: every kernel auto did not pick (sdpa, math, chunked), so sdpa when auto chose another;
   - precision fp32, where the default is bf16 (a CPU with bf16 matrices);
   - packing: S = 2, 4, 8 seeds as one stacked model (``searchmaps.train.packed``) on one thread,
     all seeds' tokens/s against one seed's (S separate trainings, one after another on the same
     thread, train at one seed's rate). Packed and separate both eager unless ``--pack-compile``
     (compiling the packed step on a CPU takes minutes for each S);
   - threads vs processes: two 1-thread trainings side by side as two processes (started together
     after their compiles), their tokens together over the time both took, against one 2-thread
     training of the same row.

Trainings run in child processes (``throughput_rows.py``), each with a fresh inductor cache, so a
compile is a cold one; the corpus is the byte-level stdlib corpus for every vocabulary. Every
figure is from this run on this host: read ratios, and compare nothing across runs or hosts.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch._dynamo

from searchmaps import attention, flops
from searchmaps.config import ModelConfig
from searchmaps.device import cpu_has_bf16, resolve_compile, resolve_precision

HERE = Path(__file__).resolve().parent
MODELS = {  # key: (name, ModelConfig fields, batch)
    "ilr": ("ILR-small T1024", dict(n_layers=4, d_model=128, n_heads=4, ffn_hidden=512, vocab_size=1024,
                                    seq_len=1024, max_positions=1024), 8),
    "bytes": ("ILR-small T128 bytes", dict(n_layers=4, d_model=128, n_heads=4, ffn_hidden=512, vocab_size=256,
                                           seq_len=128, max_positions=1024), 16),
    "d64": ("d-64 T256", dict(n_layers=4, d_model=64, n_heads=2, ffn_hidden=256, vocab_size=1024, seq_len=256,
                              max_positions=1024), 32),
}
PEAK_ROWS = 8192  # rows of the peak's products: batch x context of ILR-small and of the d-64 model


def matmul_gflops(d: int, ffn: int, dtype, threads: int, repeats: int) -> float:
    """GFLOP/s of a (PEAK_ROWS x d) @ (d x ffn) product in ``dtype`` on ``threads``, best of ``repeats``."""
    torch.set_num_threads(threads)
    a, b = torch.randn(PEAK_ROWS, d, dtype=dtype), torch.randn(d, ffn, dtype=dtype)
    a @ b
    best = math.inf
    for _ in range(repeats):
        t = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - t)
    return 2 * PEAK_ROWS * d * ffn / best / 1e9


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(HERE), *args], check=True, capture_output=True, text=True).stdout.strip()


@contextlib.contextmanager
def worktree(rev: str):
    """A detached worktree of ``rev`` in a temporary folder, removed on the way out (errors too)."""
    tmp = Path(tempfile.mkdtemp(prefix="train-throughput-"))
    tree = tmp / "tree"
    try:
        git("worktree", "add", "--detach", str(tree), rev)
        yield tree
    finally:
        subprocess.run(["git", "-C", str(HERE), "worktree", "remove", "--force", str(tree)], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def start(rows: list[dict], root: Path, scratch: Path, barrier: tuple[Path, int] | None = None) -> subprocess.Popen:
    """throughput_rows.py on ``rows`` with ``root``'s searchmaps, a fresh inductor cache."""
    folder = Path(tempfile.mkdtemp(dir=scratch))
    (folder / "rows.json").write_text(json.dumps(rows))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
               TORCHINDUCTOR_CACHE_DIR=str(folder / "inductor"))
    extra = ["--barrier", str(barrier[0]), str(barrier[1])] if barrier else []
    return subprocess.Popen([sys.executable, str(HERE / "throughput_rows.py"), str(folder / "rows.json"), *extra],
                            cwd=root, env=env, stdout=subprocess.PIPE, text=True)


def collect(proc: subprocess.Popen, label: str) -> list[dict]:
    out = []
    for line in proc.stdout:
        if line.startswith("ROW "):
            r = json.loads(line[4:])
            out.append(r)
            what = "error: " + r["error"] if "error" in r else f"{r['tokens_per_s']:,.0f} tokens/s"
            print(f"  [{label}] {r['name']} {r['map']} {r['threads']}t {r['what']}: {what}", file=sys.stderr,
                  flush=True)
    if proc.wait():
        raise SystemExit(f"{label}: the rows' process exited {proc.returncode}")
    return out


def gflops(r: dict) -> float:
    cfg = ModelConfig(**r["model"]).with_map(r["map"])
    return r["tokens_per_s"] * flops.train_flops_per_token(cfg) / 1e9


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tokens", type=float, default=5e4, help="tokens per timed row (at least 3 steps)")
    p.add_argument("--models", default="ilr,bytes,d64", help=f"of {', '.join(MODELS)}")
    p.add_argument("--maps", default="1,1,1,1;4,2,1,1", help="maps, separated by ;")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--ablate", default="d64,ilr", help="models with ablation lines ('' for none)")
    p.add_argument("--pack-sizes", default="2,4,8")
    p.add_argument("--pack-compile", action="store_true", help="compile the packed step (minutes per S on a CPU)")
    p.add_argument("--baseline", default=None, help="a commit whose trainer runs the same rows (e.g. 378850d)")
    p.add_argument("--json", default=None, help="also write every figure to this file")
    p.add_argument("--quick", action="store_true", help="smoke test: the d-64 model, one map, 1 thread, 3 steps a row")
    args = p.parse_args()
    if args.quick:
        args.tokens, args.models, args.maps, args.threads = 1, "d64", "1,1,1,1", "1"
        args.ablate, args.pack_sizes = "d64", "2"
    if args.baseline and subprocess.run(["git", "-C", str(HERE), "rev-parse", "--verify", "--quiet",
                                         args.baseline + "^{commit}"], capture_output=True).returncode:
        raise SystemExit(f"--baseline {args.baseline}: not a commit of this repository")
    models, maps = args.models.split(","), args.maps.split(";")
    threads = [int(t) for t in args.threads.split(",")]
    ablate = [m for m in args.ablate.split(",") if m]
    repeats = 3 if args.quick else 10
    scratch = Path(tempfile.mkdtemp(prefix="train-throughput-"))
    try:
        report = run(args, models, maps, threads, ablate, repeats, scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1) + "\n")


def run(args, models, maps, threads, ablate, repeats, scratch: Path) -> dict:
    t_start = time.time()
    bf16 = cpu_has_bf16()
    commit = git("rev-parse", "--short", "HEAD")
    commit += "-dirty" if git("status", "--porcelain", "--untracked-files=no") else ""
    machine = {"cpu": attention.cpu_name(), "torch": torch.__version__,
               "capability": torch.backends.cpu.get_cpu_capability(),
               "bf16_matrices": bf16, "cores": os.cpu_count(), "load_1min": os.getloadavg()[0], "commit": commit}
    print(f"machine: {machine['cpu']}; torch {machine['torch']}; capability {machine['capability']}; bf16 matrices: "
          f"{'yes' if bf16 else 'no (bf16 products emulated)'}; {machine['cores']} cores; threads "
          f"{','.join(map(str, threads))}; load at start {machine['load_1min']:.2f}; commit {commit}")

    # ------------------------------------------------------------------ peaks
    peaks, emulated = {}, {}  # (d, threads, precision) -> GFLOP/s; "d/threads" -> emulated bf16 GFLOP/s
    print(f"\nmatmul peaks at the models' FFN shapes (GFLOP/s, best of {repeats}):")
    print(f"{'product':<24} {'threads':>7} {'fp32':>8} {'bf16':>20}")
    measured = sorted(set(threads) | ({1} if ablate else set()))  # the ablations train on 1 thread
    for d, ffn in ((128, 512), (64, 256)):
        for t in measured:
            peaks[d, t, "fp32"] = matmul_gflops(d, ffn, torch.float32, t, repeats)
            b = matmul_gflops(d, ffn, torch.bfloat16, t, repeats if bf16 else 2)
            if bf16:
                peaks[d, t, "bf16"] = b
            else:  # no bf16 row trains here (the trainer refuses it): the fp32 peak is the roofline
                emulated[f"{d}/{t}"] = b
            shown = f"{b:.1f}" if bf16 else f"emulated: {b:.1f}"
            print(f"{f'{PEAK_ROWS}x{d} @ {d}x{ffn}':<24} {t:>7} {peaks[d, t, 'fp32']:>8.1f} {shown:>20}", flush=True)

    # ------------------------------------------------------------------ the trainer's automatic choices
    precision, compile_on = resolve_precision("auto", "cpu"), resolve_compile("auto", "cpu")
    kernels, timings = {}, []
    # one compile of each kernel per shape and thread count: more than dynamo's default limit of 8
    # recompiles, past which it would time the kernels eager, silently
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    print(f"\ndefault trainer here: precision {precision}, compile {'on' if compile_on else 'off'}; attention auto "
          f"(fwd+bwd ms at the training's shape; sdpa kept unless another is {attention.MARGIN}x faster):")
    print(f"{'model':<22} {'threads':>7} " + " ".join(f"{k:>8}" for k in attention.KERNELS) + "   choice  measured in")
    for m in dict.fromkeys(models + ablate):
        name, fields, batch = MODELS[m]
        cfg = ModelConfig(**fields)
        for t in measured:
            cache = scratch / f"attention-{m}-{t}.json"  # one shape a file: measured afresh, read back below
            t0 = time.perf_counter()
            kernels[m, t] = attention.resolve("auto", device="cpu", precision=precision, batch=batch, heads=cfg.n_heads,
                                              seq_len=cfg.seq_len, head_dim=cfg.head_dim, threads=t,
                                              compile=compile_on, cache=cache)
            times = next(iter(json.loads(cache.read_text()).values()))["times_s"]
            spent = time.perf_counter() - t0
            timings.append({"model": m, "threads": t, "times_s": times, "kernel": kernels[m, t], "measure_s": spent})
            print(f"{name:<22} {t:>7} " + " ".join(f"{times[k] * 1e3:>8.1f}" for k in attention.KERNELS)
                  + f"   {kernels[m, t]:<7} {spent:.0f} s", flush=True)

    def row(m: str, map_: str, t: int, what: str = "default", **change) -> dict:
        name, fields, batch = MODELS[m]
        step = batch * fields["seq_len"]
        r = dict(key=m, name=name, model=fields, batch=batch, map=map_, threads=t, precision=precision,
                 compile=compile_on, attention=kernels[m, t], tokens=max(int(args.tokens), 3 * step),
                 warm_tokens=step, what=what)
        return {**r, **change}

    rows = [row(m, mp, t) for m in models for t in threads for mp in maps]
    abl = []
    for m in ablate:
        base = row(m, maps[0], 1, "default")
        abl.append(base)
        if compile_on:
            abl.append(row(m, maps[0], 1, "compile off", compile=False))
        abl += [row(m, maps[0], 1, f"attention {k}", attention=k) for k in attention.KERNELS if k != base["attention"]]
        if precision == "bf16":
            abl.append(row(m, maps[0], 1, "precision fp32", precision="fp32"))
        for s in (int(x) for x in args.pack_sizes.split(",") if x):
            abl.append(row(m, maps[0], 1, f"{s} seeds packed", seeds=s, compile=compile_on and args.pack_compile))

    # ------------------------------------------------------------------ the trainings
    first = f", {args.baseline}'s first" if args.baseline else ""
    print(f"\ntraining {len(rows)} rows{first}, and {len(abl)} ablations (progress on stderr) ...", flush=True)
    base_rows = []
    if args.baseline:  # just before this commit's rows: the machine as alike as it gets
        with worktree(args.baseline) as tree:
            base_commit = git("-C", str(tree), "rev-parse", "--short", "HEAD")
            base_rows = collect(start(rows, tree, scratch), base_commit)
    root = HERE.parent
    done = collect(start(rows + abl, root, scratch), commit)
    rows, abl = done[:len(rows)], done[len(rows):]
    pairs = {}
    if os.cpu_count() >= 2:
        for m in ablate:
            gate = Path(tempfile.mkdtemp(dir=scratch))
            procs = [start([row(m, maps[0], 1, "2 processes")], root, scratch, (gate, 2)) for _ in range(2)]
            pairs[m] = [collect(pr, f"{commit} pair")[0] for pr in procs]

    # ------------------------------------------------------------------ the tables
    def peak(r: dict) -> float:
        return peaks[128 if r["model"]["d_model"] == 128 else 64, r["threads"], r["precision"]]

    for r in rows + abl + base_rows:
        if "error" not in r:
            r["gflops"], r["peak_gflops"] = gflops(r), peak(r)
            r["of_peak"] = r["gflops"] / r["peak_gflops"]
    wall = time.time() - t_start
    print(f"\nrows: share of peak = GFLOP/s over the matmul peak above of the row's precision"
          f"{'' if bf16 else ' (fp32: no bf16 matrices here)'}, its model's FFN shape and thread count; "
          f"tokens a row: --tokens {int(args.tokens):,}, at least 3 steps"
          + (f"; ratio = {commit} / {args.baseline}" if args.baseline else ""))
    head = (f"{'model':<22} {'map':<8} {'thr':>3} {'prec':<4} {'attention':<9} {'tokens/s':>9} {'GFLOP/s':>8} "
            f"{'peak':>6} {'of peak':>7} {'compile s':>9}")
    print(head + (f" {'baseline':>9} {'ratio':>6}" if args.baseline else ""))
    by_key = {(b["name"], b["map"], b["threads"]): b for b in base_rows}
    for r in rows:
        line = f"{r['name']:<22} {r['map']:<8} {r['threads']:>3} {r['precision']:<4} {r['attention']:<9} "
        if "error" in r:
            print(line + "error: " + r["error"])
            continue
        line += (f"{r['tokens_per_s']:>9,.0f} {r['gflops']:>8.1f} {r['peak_gflops']:>6.1f} {r['of_peak']:>7.1%} "
                 f"{r['compile_s']:>9.1f}")
        b = by_key.get((r["name"], r["map"], r["threads"]))
        if b is not None:
            line += f"  baseline error: {b['error'][:80]}" if "error" in b else \
                f" {b['tokens_per_s']:>9,.0f} {r['tokens_per_s'] / b['tokens_per_s']:>5.2f}x"
        print(line)

    if abl:
        print(f"\nablations: map {maps[0]}, 1 thread; ratio to the default row (packed: to S separate trainings, "
              f"one seed's rate{'' if args.pack_compile else ', both eager'}; processes: to one 2-thread training)")
        print(f"{'model':<22} {'change':<30} {'tokens/s':>9} {'of peak':>7} {'compile s':>9} {'ratio':>7}")
        for m in ablate:
            mine = [r for r in abl if r["key"] == m]
            default = mine[0]
            pack_compile = compile_on and args.pack_compile
            separate = next((r for r in mine if r.get("seeds", 1) == 1 and r["compile"] == pack_compile
                             and r["attention"] == default["attention"] and r["precision"] == precision), None)
            for r in mine:
                what = r["what"] if r["what"] != "default" else \
                    f"default: {r['precision']}, {'compiled' if r['compile'] else 'eager'}, {r['attention']}"
                if "error" in r or "error" in default:
                    print(f"{r['name']:<22} {what:<30} error: {r.get('error') or default['error']}")
                    continue
                against = separate if r.get("seeds", 1) > 1 else default
                ratio = r["tokens_per_s"] / against["tokens_per_s"] if against and "error" not in against else math.nan
                r["ratio"] = ratio
                print(f"{r['name']:<22} {what:<30} {r['tokens_per_s']:>9,.0f} {r['of_peak']:>7.1%} "
                      f"{r['compile_s']:>9.1f} {ratio:>6.2f}x")
            if m in pairs:
                two = pairs[m]
                if any("error" in r for r in two):
                    print(f"{default['name']:<22} {'2 processes x 1 thread':<30} error: "
                          + next(r["error"] for r in two if "error" in r))
                    continue
                agg = sum(r["tokens"] for r in two) / (max(r["end"] for r in two) - min(r["start"] for r in two))
                one = next((r for r in rows if r["key"] == m and r["map"] == maps[0] and r["threads"] == 2
                            and "error" not in r), None)
                ratio = agg / one["tokens_per_s"] if one else math.nan
                pairs[m] = {"runs": two, "aggregate_tokens_per_s": agg, "ratio_to_2_threads": ratio}
                print(f"{default['name']:<22} {'2 processes x 1 thread':<30} {agg:>9,.0f} {'':>7} {'':>9} "
                      + (f"{ratio:>6.2f}x" if one else "   n/a (no 2-thread row)"))
    print(f"\n{wall / 60:.1f} minutes")
    return {"machine": machine, "tokens": int(args.tokens), "precision": precision, "compile": compile_on,
            "peaks": [{"d": d, "threads": t, "precision": pr, "gflops": g} for (d, t, pr), g in peaks.items()],
            "emulated_bf16_gflops": emulated, "attention": timings,
            "rows": rows, "baseline": {"rev": args.baseline, "rows": base_rows} if args.baseline else None,
            "ablations": abl, "processes": pairs, "wall_s": wall}


if __name__ == "__main__":
    main()
