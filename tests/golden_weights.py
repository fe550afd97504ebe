"""Weights summed up so that other CPU kernels can be told from another training
(:func:`weights_summary`), and the script that added those of the trainer before its split
to ``tests/golden/train.json``, next to the sha256 digests its AVX512 host wrote::

    git worktree add /tmp/golden-ref 80e8355           # the commit "Golden numbers"
    python tests/golden_weights.py /tmp/golden-ref     # that commit's trainer, on its own cases
    git worktree remove /tmp/golden-ref

A digest of the weights' bytes is equal only on the same kernels, bit for bit; a norm and a sum
per tensor move by float rounding on other kernels and by far more after any other training
(a step more or fewer, another learning rate), so ``test_train`` compares them within a tolerance.
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).resolve().parent / "golden" / "train.json"
KERNEL_SETTINGS = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA")


def weights_summary(model) -> dict[str, list[float]]:
    """Each tensor of ``model.state_dict()``: its L2 norm and its sum, summed in float64."""
    return {k: [v.detach().double().norm().item(), v.detach().double().sum().item()]
            for k, v in model.state_dict().items()}


def cpu_model() -> str:
    """The CPU's name as /proc/cpuinfo gives it (else the platform's word for it)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.processor()
    return next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")),
                platform.processor())


def add_summaries(ref: Path) -> None:
    """Run the kept cases with the test module and the trainer of the checkout ``ref`` (the
    commit that wrote the kept numbers), its weights digest swapped for :func:`weights_summary`,
    and add each case's summaries (``weights_summary``, one per model its ``on_model`` saw)
    and the host and kernels that computed them (``env.weights_summary``) to the kept file;
    nothing kept is changed."""
    sys.path[:0] = [str(ref), str(ref / "tests")]
    import torch

    import searchmaps
    import test_train as before
    from searchmaps.data import load_corpus

    for module in (searchmaps, before):  # not this checkout's
        assert Path(module.__file__).resolve().is_relative_to(ref.resolve()), module.__file__
    before.weights_digest = weights_summary  # its on_model hook calls it by this name
    kept = json.loads(GOLDEN.read_text())
    corpus = load_corpus("stdlib")
    with tempfile.TemporaryDirectory() as tmp:
        for name, case in kept["cases"].items():
            case["weights_summary"] = before._run_case(name, corpus, Path(tmp))["weights"]
    commit = subprocess.run(["git", "-C", str(ref), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    kept["env"]["weights_summary"] = {
        "torch": torch.__version__, "cpu": torch.backends.cpu.get_cpu_capability(), "cpu_model": cpu_model(),
        **{k: os.environ.get(k, "") for k in KERNEL_SETTINGS}, "code": commit}
    GOLDEN.write_text(json.dumps(kept, indent=1, default=str) + "\n")


if __name__ == "__main__":
    assert len(sys.argv) == 2, "usage: python tests/golden_weights.py CHECKOUT_OF_THE_GOLDEN_COMMIT"
    add_summaries(Path(sys.argv[1]))
