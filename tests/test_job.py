"""The driver's job to a worker is a frozen record that travels as a dict (Ray Tune's trial
config) and comes back equal."""

import pytest

from searchmaps.config import ModelConfig, TrainConfig, TrialSpec
from searchmaps.units import Job, Run


def spec(seed: int) -> TrialSpec:
    return TrialSpec(model=ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1"),
                     train=TrainConfig(tokens=4096, batch_size=2), seed=seed)


def test_a_job_and_a_packs_job_come_back_equal_from_their_dicts():
    alone = Job(unit="2,1|rope#0", runs=(Run(spec(0), save_rungs=("/s/a0.pt", "/s/a1.pt")),), vocab_size=256,
                horizons=(1024.0, 2048.0, 4096.0), record=(1, 2), snapshot="/s/snap.pt", snapshot_every_s=60.0)
    pack = Job(unit="2,1|rope#0+1", packed=True, first=1, last=2, record=(2,),
               runs=(Run(spec(0), resume="/s/a.pt", save="/s/b.pt"), Run(spec(1), resume="/s/c.pt")))
    for job in (alone, pack):
        d = job.to_dict()
        assert Job.from_dict(d) == job
        assert all(isinstance(v, (str, int, float, bool, list, dict, type(None))) for v in d.values())
    assert alone.spec == spec(0) and pack.spec == spec(0)


def test_several_runs_are_a_pack_or_refused():
    with pytest.raises(ValueError, match="a pack of runs"):
        Job(unit="x", runs=(Run(spec(0)), Run(spec(1))))
    with pytest.raises(ValueError):
        Job(unit="x", runs=())
