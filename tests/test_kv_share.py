"""Memory-shared loops (``--kv-share first:W``): a repeated layer's later passes read the
first pass's keys and values for positions W or more back and their own inside the window.
Checked against token-by-token decoding from a real cache (``LoopedLM.decode``, which holds
exactly the cache ``flops.kv_bytes_per_token`` counts), against ``none`` where nothing can
be shared, and through every path that trains a model (compiled layers, packed seeds)."""

import csv
import dataclasses
import json

import pytest
import torch
from helpers import run_cli, run_cli_warm, tiny_spec
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from searchmaps import flops
from searchmaps.config import (NO_SHARING, POSITIONAL_ENCODINGS, ConfigError, KvShare, ModelConfig, ReuseMap, TrialSpec,
                               parse_kv_share)
from searchmaps.model import LoopedLM, share_keys
from searchmaps.train import train, train_packed

PES = list(POSITIONAL_ENCODINGS)
REPEATED = ["3,1,2,1", "block:2"]


def tiny(pe="rope", reuse="3,1,2,1", kv="none", seq_len=16, **kw) -> ModelConfig:
    return ModelConfig(d_model=32, n_heads=4, seq_len=seq_len, pe=pe, kv_share=kv, **kw).with_map(reuse)


def model_of(cfg: ModelConfig, seed: int = 0) -> LoopedLM:
    torch.manual_seed(seed)
    return LoopedLM(cfg).eval()


def tokens(T=16, B=2, seed=1):
    return torch.randint(0, 256, (B, T), generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- the option


@pytest.mark.parametrize("bad", ["first:0", "first:x", "first:-1", "foo", "first:", "first:1.5", "first:08", "",
                                 "First:4", 4])
def test_bad_values_name_the_flag(bad):
    with pytest.raises(ConfigError, match="^--kv-share") as e:
        tiny(kv=bad)
    assert "\n" not in str(e.value)


def test_the_default_keeps_the_hash_of_rows_from_before_the_option():
    spec = TrialSpec()
    old = {k: v for k, v in spec.to_dict().items() if k != "model.kv_share"}  # a row written before it existed
    assert TrialSpec.from_dict(old).config_hash() == spec.config_hash()
    shared = dataclasses.replace(spec, model=dataclasses.replace(spec.model, kv_share="first:64"))
    assert shared.config_hash() != spec.config_hash()
    assert TrialSpec.from_dict(shared.to_dict()).config_hash() == shared.config_hash()


PINNED = {  # TrialSpec(model=ModelConfig(d_model=32, seq_len=32, reuse 4,2,1,1), train=TrainConfig(tokens=4096,
    # batch_size=4)) as the text-valued option wrote it: the typed value must serialise to these bytes
    "none": "b751fd5006a4",
    "first:64": "e33ed011f6ee",
}


@pytest.mark.parametrize("text", sorted(PINNED))
def test_the_typed_setting_serialises_as_the_text_did(text):
    """Parsed once into a KvShare, the setting is written exactly as its text was: the config
    dict, the config hash, a row's columns and its JSON, and read back to the same value."""
    from searchmaps.config import TrainConfig
    from searchmaps.results import describe, parse_row

    kv = parse_kv_share(text)
    assert str(kv) == text and kv.shared == (text != "none") and kv.window == (64 if kv.shared else None)
    assert parse_kv_share(kv) is kv and parse_kv_share(str(kv)) == kv
    spec = TrialSpec(model=ModelConfig(d_model=32, n_heads=4, seq_len=32, kv_share=text).with_map("4,2,1,1"),
                     train=TrainConfig(tokens=4096, batch_size=4))
    assert spec.model.kv_share == kv and spec.model.kv_window == kv.window
    d = spec.to_dict()
    assert d["model.kv_share"] == text and type(d["model.kv_share"]) is str
    assert spec.config_hash() == PINNED[text]
    assert TrialSpec.from_dict(d) == spec and TrialSpec.from_dict(d).config_hash() == PINNED[text]
    model = {"model.n_layers": 4, "model.d_model": 32, "model.n_heads": 4, "model.ffn_hidden": 128,
             "model.vocab_size": 256, "model.seq_len": 32, "model.pe": "rope", "model.max_positions": 1024,
             "model.residual": "prenorm", "model.reuse": "4,2,1,1", "model.rope_theta": 10000.0,
             "model.init": "scaled", "model.kv_share": text}
    assert json.dumps({k: v for k, v in d.items() if k.startswith("model.")}) == json.dumps(model)  # bytes, in order
    row = describe(spec)
    assert row.to_row()["kv_share"] == text and row.to_row()["config.model.kv_share"] == text
    assert json.loads(row.to_json())["kv_share"] == text and type(row).from_json(row.to_json()).kv_share == kv
    cells = {k: "" if v is None else str(v) for k, v in row.to_row().items()}
    assert parse_row(cells, "runs.csv:2").kv_share == kv
    assert row.label == "4,2,1,1|rope" + ("" if text == "none" else f"|{text}")


# --------------------------------------------------------------------------- what it computes


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", REPEATED)
def test_a_window_as_long_as_the_context_is_none_exactly(pe, reuse):
    idx = tokens()
    ref_logits, ref_loss = model_of(tiny(pe, reuse))(idx, idx)
    for W in (16, 17, 1000):
        logits, loss = model_of(tiny(pe, reuse, f"first:{W}"))(idx, idx)
        assert torch.equal(logits, ref_logits) and torch.equal(loss, ref_loss)
    logits, _ = model_of(tiny(pe, reuse, "first:15"))(idx, idx)
    assert not torch.allclose(logits, ref_logits, atol=1e-4)  # one position shared already changes it


@pytest.mark.parametrize("pe", PES)
def test_the_shared_path_with_a_full_window_is_plain_causal_attention(pe):
    """The masked path itself (both key sets on one axis, the encoding's bias by position):
    with W = T every key is the pass's own, and the result is the causal one."""
    model = model_of(tiny(pe))
    e, pos = model.embed(tokens())
    layer = model.layers[0]
    x, first = layer(e, pos, keep=True)
    shared = layer(x, pos, kv=first, keys=share_keys(16, 16))
    assert torch.allclose(shared, layer(x, pos), atol=1e-6, rtol=0)
    assert torch.equal(x, layer(e, pos))  # keep changes nothing about the output


@pytest.mark.parametrize("pe", PES)
def test_a_map_without_repeats_is_unchanged(pe):
    idx = tokens()
    ref = model_of(tiny(pe, "1,1,1,1"))(idx, idx)
    for W in (1, 5):
        got = model_of(tiny(pe, "1,1,1,1", f"first:{W}"))(idx, idx)
        assert torch.equal(got[0], ref[0]) and torch.equal(got[1], ref[1])


@pytest.mark.parametrize("reuse", ["3,1,2,1", "block:2"])
def test_the_first_pass_is_unchanged_and_the_later_ones_are_not(reuse):
    """Layer 0's output on every pass, shared (W = 3) and not: the first pass equal bit for
    bit, the later passes different (they read other keys)."""
    outs = {}
    for kv in ("none", "first:3"):
        model, seen = model_of(tiny("rope", reuse, kv)), []
        model.layers[0].register_forward_hook(lambda m, inp, out: seen.append(out[0] if isinstance(out, tuple) else out))
        model(tokens())
        outs[kv] = seen
    assert len(outs["none"]) == len(outs["first:3"]) >= 2
    assert torch.equal(outs["none"][0], outs["first:3"][0])
    assert all(not torch.allclose(a, b, atol=1e-5) for a, b in zip(outs["none"][1:], outs["first:3"][1:]))


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", REPEATED)
@pytest.mark.parametrize("kv", ["none", "first:1", "first:4"])
def test_decoding_from_the_cache_gives_the_parallel_forwards_logits(pe, reuse, kv):
    """An independent implementation: token by token, each later pass reading a ring of its
    last W keys and the first pass's cache beyond it (positions, not masks)."""
    model = model_of(tiny(pe, reuse, kv))
    idx = tokens(T=12)
    parallel, _ = model(idx)
    decoded, _ = model.decode(idx)
    assert torch.allclose(decoded, parallel, atol=2e-5, rtol=0)


@pytest.mark.parametrize("pe", PES)
def test_still_causal(pe):
    model = model_of(tiny(pe, "3,1,2,1", "first:3"))
    idx = tokens(B=1)
    changed = idx.clone()
    changed[0, 10] = (idx[0, 10] + 1) % 256
    a, _ = model(idx)
    b, _ = model(changed)
    assert torch.allclose(a[0, :10], b[0, :10], atol=1e-6)
    assert not torch.allclose(a[0, 10:], b[0, 10:])


def test_gradients_reach_every_parameter_through_the_shared_keys():
    model = LoopedLM(tiny("alibi", "1,3,1,1", "first:2"))
    idx = tokens()
    model(idx, idx)[1].backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
               for p in model.parameters())


# --------------------------------------------------------------------------- what it costs


@pytest.mark.parametrize("reuse", ["1,1,1,1", "3,1,2,1", "4,2,1,1", "block:2", "block:3"])
@pytest.mark.parametrize("kv", ["none", "first:1", "first:4", "first:16", "first:50"])
def test_kv_bytes_per_token_is_the_cache_decoding_holds(reuse, kv):
    cfg = tiny("rope", reuse, kv)  # context 16, d 32: the count is exact for every window here
    _, cache = model_of(cfg).decode(tokens(T=cfg.seq_len, B=1))
    held = sum(K.numel() + V.numel() for _, K, V in cache)  # elements, one sequence
    assert len(cache) == cfg.reuse.applied_layers
    assert flops.kv_bytes_per_token(cfg) * cfg.seq_len == held * 2  # 16-bit entries


def test_kv_bytes_by_hand_at_ilr_context():
    # 4,2,1,1 at context 1,024, d 128: 8 passes x (K + V) x 128 x 2 bytes = 4,096 bytes a token;
    # first:64 keeps 4 first passes x 1,024 positions + 4 later passes x 64: 4,352 of 8,192 positions
    cfg = ModelConfig(seq_len=1024).with_map("4,2,1,1")
    assert flops.kv_bytes_per_token(cfg) == 4096
    assert flops.kv_bytes_per_token(dataclasses.replace(cfg, kv_share="first:64")) == 4352 * 512 // 1024 == 2176
    assert flops.kv_bytes_per_token(dataclasses.replace(cfg, kv_share="first:2048")) == 4096
    base = cfg.with_map("1,1,1,1")
    assert flops.kv_bytes_per_token(dataclasses.replace(base, kv_share="first:1")) == flops.kv_bytes_per_token(base)


@pytest.mark.parametrize("pe", PES)
@pytest.mark.parametrize("reuse", ["3,1,2,1", "block:2"])
def test_flops_are_the_same_as_without_sharing_and_the_counter_sees_the_masked_slots(pe, reuse):
    """flops_per_token counts each query reading each earlier position once, shared or not;
    the parallel forward's later passes score 2T key slots: 4*T*d more per later pass."""
    cfg = tiny(pe, reuse, "first:4", seq_len=24)
    assert flops.flops_per_token(cfg) == flops.flops_per_token(dataclasses.replace(cfg, kv_share="none"))
    model, idx = model_of(cfg), tokens(T=24)
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        model(idx)
    later = cfg.reuse.applied_layers - cfg.n_layers
    overhead = later * 4 * cfg.seq_len * cfg.d_model
    assert counter.get_total_flops() / idx.numel() == pytest.approx(flops.flops_per_token(cfg) + overhead, rel=1e-3)


# --------------------------------------------------------------------------- training paths


def shared_spec(seed=0, **kw):
    spec = tiny_spec("3,1", "alibi", seed=seed, **kw)  # context 32, window 8
    return dataclasses.replace(spec, model=dataclasses.replace(spec.model, kv_share="first:8"))


@pytest.mark.parametrize("pe", PES)
def test_a_layer_compiles_whole_in_every_call_of_a_shared_forward(pe):
    """Each call a shared forward makes of a layer (plain, keeping its keys, reading shared
    ones) traces as one graph (fullgraph: no break, no silent eager fallback) and gives the
    eager numbers, forward and backward. (aot_eager: dynamo's and autograd's trace without
    inductor's code generation, which the trainer's compiled tests run.)"""
    torch._dynamo.reset()  # each encoding's graphs counted afresh against the recompile limit
    model = model_of(tiny(pe, "2,1,1,1", "first:4"))
    e, pos = model.embed(tokens())
    layer = model.layers[0]
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True, dynamic=False)
    for run in (layer, compiled):
        x, first = run(e, pos, keep=True)
        y = run(x, pos, kv=first, keys=share_keys(16, 4))
        z = run(y, pos)
        grad = torch.autograd.grad(z.square().sum(), layer.attn.qkv.weight)[0]
        if run is layer:
            ref = (x, y, z, grad)
    for a, b in zip(ref, (x, y, z, grad)):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-5)


def test_packed_seeds_match_their_separate_trainings(corpus):
    specs = [shared_spec(seed=s, tokens=20 * 4 * 32) for s in range(2)]
    packed = train_packed(specs, None, corpus)
    alone = [train(s, corpus) for s in specs]
    plain = train(dataclasses.replace(specs[0], model=dataclasses.replace(specs[0].model, kv_share="none")), corpus)
    for p, a in zip(packed, alone):
        assert abs(p.val_loss - a.val_loss) < 3e-6 and p.config == a.config
    assert abs(plain.val_loss - alone[0].val_loss) > 1e-4  # sharing took part


# --------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("bad", ["first:0", "first:x", "first:-1", "foo"])
def test_the_train_command_refuses_a_bad_window(tmp_path, capsys, bad):
    from searchmaps.train.__main__ import main

    runs = tmp_path / "runs.csv"
    assert main(["--map", "2,1,1,1", "--kv-share", bad, "--tokens", "1e3", "--runs", str(runs)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--kv-share" in err, err
    assert list(tmp_path.iterdir()) == []  # nothing written


@pytest.mark.e2e
def test_the_train_command_trains_a_shared_map(tmp_path):
    """As a user runs it, in a process of its own: the row says the setting."""
    from searchmaps.results import read_runs

    runs = tmp_path / "runs.csv"
    out = run_cli_warm("train", "--map", "2,1", "--layers", "2", "--d-model", "32", "--heads", "2", "--seq-len", "32",
                  "--kv-share", "first:8", "--tokens", "512", "--batch-size", "4", "--eval-tokens", "256",
                  "--compile", "off", "--quiet", "--runs", runs)
    assert out.returncode == 0, out.stderr
    (row,) = read_runs(runs)
    assert row.label == "2,1|rope|first:8" and row.kv_bytes_per_token == flops.kv_bytes_per_token(
        ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32, kv_share="first:8").with_map("2,1"))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("compile", [False, True])
def test_packed_on_cuda_matches_separate_on_cuda(corpus, compile):
    """The GPU study's path: seeds packed (math attention under vmap) against separate
    trainings (the fused kernels with a boolean mask), bf16, compiled or not."""
    specs = [dataclasses.replace(shared_spec(seed=s, tokens=20 * 4 * 32, precision="bf16", compile=compile),
                                 device="cuda") for s in range(3)]
    packed = train_packed(specs, None, corpus)
    for p, a in zip(packed, [train(s, corpus) for s in specs]):
        assert p.device.startswith("cuda") and abs(p.val_loss - a.val_loss) < 3e-2


# --------------------------------------------------------------------------- a factor of the search


def shared_space(tmp_path, kv='["none", "first:8"]', where="top"):
    from conftest import TINY_SPACE

    text = TINY_SPACE.replace('pe = ["rope"]', f'pe = ["rope"]\nkv_share = {kv}') if where == "top" else \
        TINY_SPACE.replace("seq_len = 32", f"seq_len = 32\nkv_share = {kv}")
    path = tmp_path / "kv.toml"
    path.write_text(text)
    return path


def test_a_space_lists_settings_as_it_lists_encodings(tmp_path):
    import optuna

    from searchmaps.config import Candidate
    from searchmaps.plan import SearchPlan
    from searchmaps.spaces import load_space
    from searchmaps.study import candidate_params, distributions, suggest_candidate

    space = load_space(str(shared_space(tmp_path)))
    assert space.kv_share == (NO_SHARING, KvShare(8)) and space.model.kv_share == NO_SHARING
    plan = SearchPlan(space=space, budget_flops=1e9, study="p", results_dir=tmp_path, sampler="grid", seeds=1)
    maps = {str(c.reuse) for c in plan.candidates}
    assert {(str(c.reuse), c.kv_share) for c in plan.candidates} == {(m, k) for m in maps for k in space.kv_share}
    shared = [c for c in plan.candidates if c.kv_share == KvShare(8)]
    assert shared[0].label == f"{shared[0].reuse}|rope|first:8"
    assert Candidate.from_label(shared[0].label, 2) == shared[0]
    assert plan.spec(shared[0], 0).model.kv_share == KvShare(8) and plan.spec(shared[0], 0).model.kv_window == 8
    assert plan.protocol()["kv_shares"] == ["none", "first:8"]
    assert plan.baseline() == Candidate(ReuseMap((1, 1)), "rope", "none")
    for c in plan.candidates:  # the optimisers' parameters say the setting and give the candidate back
        params = candidate_params(plan, c)
        dists = distributions(plan)
        optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params}, value=0.0)
        assert suggest_candidate(optuna.trial.FixedTrial(params), plan) == c
    one = SearchPlan(space=space, budget_flops=1e9, study="p", results_dir=tmp_path, sampler="grid", seeds=1,
                     kv_shares=("first:8",))
    assert {c.kv_share for c in one.candidates} == {KvShare(8)} and one.shares_memory
    plain = SearchPlan(space=space, budget_flops=1e9, study="p", results_dir=tmp_path, sampler="grid", seeds=1,
                       kv_shares=("none",))
    assert not plain.shares_memory
    assert "kv_shares" not in plain.protocol() and "kv_share" not in distributions(plain)  # as before the option
    assert "kv_share" not in plain.protocol()["model"] and "kv_share" not in candidate_params(plain, plain.candidates[0])


def test_rows_carry_the_setting_and_old_files_read_as_none(tmp_path):
    from searchmaps.results import RunsFile, describe, read_runs

    spec = shared_spec()
    row = describe(spec)
    assert row.kv_share == KvShare(8) and row.label == "3,1|alibi|first:8" and row.config["model.kv_share"] == "first:8"
    assert row.candidate.kv_share == KvShare(8)
    RunsFile(tmp_path / "runs.csv").append([row, describe(tiny_spec())])
    back = read_runs(tmp_path / "runs.csv")
    assert [(r.kv_share, r.label) for r in back] == [(KvShare(8), "3,1|alibi|first:8"), (NO_SHARING, "1,1|rope")]
    old = tmp_path / "old.csv"  # a runs.csv from before the column: its rows are none; a shared row is refused
    with open(tmp_path / "runs.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    with open(old, "w", newline="") as f:
        keep = [k for k in rows[0] if k not in ("kv_share", "config.model.kv_share")]
        writer = csv.DictWriter(f, keep, extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerow(rows[1])
    assert [r.kv_share for r in read_runs(old)] == [NO_SHARING]
    with pytest.raises(ConfigError, match="--kv-share"):
        RunsFile(old).append([describe(shared_spec(seed=1))])
    assert RunsFile(old).append([describe(tiny_spec(seed=1))]) == 1


@pytest.mark.parametrize("how", ["flag", "space", "model"])
@pytest.mark.parametrize("bad", ["first:0", "first:x", "first:-1", "foo"])
def test_the_search_command_refuses_a_bad_setting(tmp_path, capsys, how, bad):
    from searchmaps.run import main

    space = shared_space(tmp_path, f'["{bad}"]' if how == "space" else f'"{bad}"', "top" if how != "model" else "model")
    if how == "flag":
        space = shared_space(tmp_path, '["none"]')
    argv = ["--space", str(space), "--budget-flops", "1e9", "--results-dir", str(tmp_path / "r"), "--dry-run"]
    assert main(argv + (["--kv-share", f"none,{bad}"] if how == "flag" else [])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ("--kv-share" in err if how != "model" else "top-level kv_share" in err), err
    assert not (tmp_path / "r").exists()


def test_the_dry_run_lists_each_setting_with_its_cache(tmp_path, capsys):
    from searchmaps.run import main

    argv = ["--space", str(shared_space(tmp_path)), "--budget-flops", "1e9", "--results-dir", str(tmp_path / "r"),
            "--dry-run", "--maps", "3,1"]
    assert main(argv) == 0
    lines = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("3,1 ")]
    cfg = ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("3,1")
    assert [(w[2], int(w[-1].replace(",", ""))) for w in lines] == [
        ("none", flops.kv_bytes_per_token(cfg)),
        ("first:8", flops.kv_bytes_per_token(dataclasses.replace(cfg, kv_share="first:8")))]
    assert int(lines[1][-1].replace(",", "")) < int(lines[0][-1].replace(",", ""))


def test_the_supernet_scores_a_shared_model_map_by_map(corpus):
    """Its scoring walk shares a layer's passes between maps, which memory sharing would
    not see: a shared model's maps are scored by their own forwards, and equal them."""
    from searchmaps.data import val_batches
    from searchmaps.supernet import score_maps
    from searchmaps.train import evaluate

    spec = shared_spec(tokens=512)
    maps = [ReuseMap.parse(m, 2) for m in ("1,1", "2,1", "3,1", "1,3")] + [ReuseMap((1, 1), 2)]
    model = model_of(spec.model)
    scores = score_maps(model, maps, corpus, spec)
    val = val_batches(corpus, spec.train.batch_size, spec.model.seq_len, spec.train.eval_tokens)
    for m in maps:
        model.cfg = spec.model.with_map(m)
        assert scores[m] == evaluate(model, val, "cpu", "fp32"), m
    model.cfg = dataclasses.replace(spec.model, kv_share="none")
    plain = score_maps(model, maps, corpus, spec)
    assert plain[maps[0]] == scores[maps[0]] and plain[maps[2]] != scores[maps[2]]


def test_planned_comparisons_name_a_setting_by_its_label(tmp_path):
    from searchmaps.config import Candidate, parse_planned, resolve_candidate
    from searchmaps.plan import SearchPlan
    from searchmaps.plan_parts import Analysis
    from searchmaps.spaces import load_space

    space = load_space(str(shared_space(tmp_path)))
    kw = dict(space=space, budget_flops=1e9, study="p", results_dir=tmp_path, seeds=1)
    for sampler in ("grid", "tpe"):  # a fixed list, and an optimiser's universe of names
        plan = SearchPlan(**kw, sampler=sampler,
                          analysis=Analysis(planned=("2,1|rope|first:8/2,1|rope", "all/1,1|rope|first:8")))
        assert plan.analysis.planned
    pairs = parse_planned(["2,1|rope|first:8/2,1|rope"], SearchPlan(**kw, sampler="grid").candidates)
    two_one = ReuseMap((2, 1))
    assert pairs == [(Candidate(two_one, "rope", "first:8"), Candidate(two_one, "rope"))]
    with pytest.raises(ConfigError, match=r"as MAP\|PE\|KV"):
        resolve_candidate("2,1", [Candidate(two_one, "rope"), Candidate(two_one, "rope", "first:8")])


def test_the_report_keeps_each_setting_a_candidate_of_its_own(tmp_path):
    """A study over both settings: summary.csv has a kv_share column and a row per (map,
    setting), with each setting's KV bytes; the Pareto figure names the setting."""
    import json

    import pandas as pd
    from helpers import study_info, study_records

    from searchmaps.report.write import write_report
    from searchmaps.results import RunsFile

    results = {"1,1,1,1|rope": [15.0, 15.2, 14.9], "4,2,1,1|rope": [13.9, 14.0, 13.8], "2,2,2,2|rope": [14.1, 14.3, 14.0]}
    rows = study_records(results)
    shared = [r.replace(kv_share="first:8", run_id=r.run_id + "-kv", val_loss=r.val_loss + 0.01,
                        kv_bytes_per_token=r.kv_bytes_per_token // 2) for r in rows]
    folder = tmp_path / "s"
    folder.mkdir()
    RunsFile(folder / "runs.csv").append(rows + shared)
    (folder / "study.json").write_text(json.dumps(study_info("s", 3, kv_shares=["none", "first:8"])))
    report = write_report(folder)
    summary = pd.read_csv(folder / "summary.csv", dtype={"candidate": str, "map": str}).set_index("candidate")
    assert list(summary.columns[:3]) == ["map", "pe", "kv_share"]
    assert set(summary.index) == set(results) | {f"{c}|first:8" for c in results}
    for c in results:
        assert summary.loc[f"{c}|first:8", "kv_share"] == "first:8" and summary.loc[c, "kv_share"] == "none"
        assert summary.loc[f"{c}|first:8", "kv_bytes_per_token"] == summary.loc[c, "kv_bytes_per_token"] // 2
    ticks = set(report.pareto_figure.layout.xaxis.ticktext)
    assert {"4,2,1,1 (none)", "4,2,1,1 (first:8)"} <= ticks, ticks


@pytest.mark.parametrize("sampler", ["grid", "tpe"])
def test_a_tiny_search_over_both_settings(ray_cluster, tmp_path, sampler):
    """End to end through Ray, the ledger and Optuna: each map once per setting, the rows
    and the trials saying which; the optimiser proposes the setting as a parameter."""
    import optuna
    from optuna.trial import TrialState

    from searchmaps.results import read_runs
    from searchmaps.run import main

    results = tmp_path / "results"
    argv = ["--space", str(shared_space(tmp_path)), "--budget-flops", "1e9", "--results-dir", str(results),
            "--compile", "off", "--precision", "fp32", "--quiet", "--no-report", "--seeds", "1", "--study", "s",
            "--sampler", sampler, "--ray-address", ray_cluster, "--tokens", "1024"]
    argv += ["--maps", "2,1"] if sampler == "grid" else ["--trials", "3"]
    assert main(argv) == 0
    rows = read_runs(results / "s" / "runs.csv")
    trials = [t for t in optuna.load_study(study_name="s", storage=f"sqlite:///{results}/s/optuna.db").get_trials()
              if t.state == TrialState.COMPLETE]
    assert sorted(r.label for r in rows) == sorted(t.user_attrs["candidate"] for t in trials)
    assert all(r.status.value == "ok" and r.config["model.kv_share"] == str(r.kv_share) for r in rows)
    assert all(t.params["kv_share"] == t.user_attrs["kv_share"] for t in trials)
    if sampler == "grid":
        assert sorted(r.label for r in rows) == ["2,1|rope", "2,1|rope|first:8"]
        assert rows[0].kv_bytes_per_token != rows[1].kv_bytes_per_token


@pytest.mark.e2e
def test_a_study_of_two_settings_prints_no_warning(tmp_path):
    """A tiny study with --kv-share none,first:8 (the local executor, no Ray) ends with its
    report and no Python warning on the terminal: a map without repeats gives bit-identical
    rows under both settings, whose zero difference once printed numpy's 'divide by zero
    encountered in log1p'."""
    from conftest import TINY_SPACE

    space = tmp_path / "tiny.toml"
    space.write_text(TINY_SPACE)
    budget = str(flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1")))
    out = run_cli("run", "--space", space, "--budget-flops", budget, "--results-dir", tmp_path / "res", "--compile", "off",
                  "--precision", "fp32", "--quiet", "--seeds", "2", "--study", "kv", "--workers", "1",
                  "--kv-share", "none,first:8", "--executor", "local", timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "Warning" not in out.stderr and "warn" not in out.stderr.lower(), out.stderr
    assert "report:" in out.stderr.splitlines()[-1]
