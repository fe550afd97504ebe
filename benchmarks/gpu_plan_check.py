"""Whether a run of benchmarks/gpu_check.sh took the GPU plan's commands: ``PLAN`` is what
``gpu_check.sh OUT STUDY_DIR --plan`` prints, ``RAN`` the ``commands.txt`` a run wrote (one
line a phase, ``NAME: ARGS``, paths as OUT, STUDY_DIR, DATA). Every phase of the plan must have
run, with the same options and values in the same order, but for the ones a CPU rehearsal
changes: the device and the sizes (:data:`SIZES`), wherever they appear. One line a
difference on stderr, exit 1; exit 0 when they agree.

    python benchmarks/gpu_plan_check.py PLAN RAN
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

# what a rehearsal on a CPU may change: the device, the model's and the study's sizes, the benchmark's
SIZES = frozenset({"--device", "--d-model", "--heads", "--ffn-hidden", "--seq-len", "--max-positions",
                   "--batch-size", "--micro-batch", "--tokens", "--eval-tokens", "--seeds", "--pack-seeds",
                   "--maps", "--tiny", "--steps", "--warmup", "--only", "--rows"})


def options(args: list[str]) -> list[tuple[str, tuple[str, ...]]]:
    """``args`` as (option, its values) in order; words before the first option under ''."""
    out: list[tuple[str, list[str]]] = [("", [])]
    for word in args:
        if word.startswith("-") and not word.lstrip("-").replace(".", "").isdigit():
            out.append((word, []))
        else:
            out[-1][1].append(word)
    return [(k, tuple(v)) for k, v in out]


def phases(text: str) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    got = {}
    for line in text.splitlines():
        if line.strip():
            name, _, args = line.partition(":")
            got[name.strip()] = options(shlex.split(args))
    return got


def differences(plan: str, ran: str) -> list[str]:
    """One line for each way the commands ``ran`` differ from ``plan`` (beyond :data:`SIZES`)."""
    want, got = phases(plan), phases(ran)
    out = [f"{name}: the GPU plan runs this phase; the run did not" for name in want if name not in got]
    out += [f"{name}: the run has a phase the GPU plan does not" for name in got if name not in want]
    for name in want.keys() & got.keys():
        a = [o for o in want[name] if o[0] not in SIZES]
        b = [o for o in got[name] if o[0] not in SIZES]
        for (ka, va), (kb, vb) in zip(a, b):
            if (ka, va) != (kb, vb):
                out.append(f"{name}: the GPU plan has {' '.join((ka, *va)).strip()!r} where the run has "
                           f"{' '.join((kb, *vb)).strip()!r}")
                break
        else:
            if len(a) != len(b):
                extra, where = (a[len(b):], "the GPU plan") if len(a) > len(b) else (b[len(a):], "the run")
                out.append(f"{name}: only {where} has {' '.join((extra[0][0], *extra[0][1])).strip()!r}")
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: gpu_plan_check.py PLAN RAN", file=sys.stderr)
        return 2
    try:
        plan, ran = (Path(a).read_text() for a in argv)
    except OSError as exc:
        print(f"gpu_plan_check.py: {exc.filename} cannot be read ({exc.strerror})", file=sys.stderr)
        return 2
    found = differences(plan, ran)
    for line in found:
        print(f"gpu_plan_check.py: {line}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
