"""ILR's recipe: the options that name the project's own choices (--init, --decay-gains,
--micro-batch, --eval-protocol), the named presets (--preset ilr-small|ilr-large|ilr-micro), and
that configurations from before the options existed keep their hash. Real trainings of
tiny models; the preset's own training runs the command line."""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from helpers import ROOT, run_cli, tiny_spec

from searchmaps.cli.run import build_parser as build_search_parser, build_plan
from searchmaps.config import ConfigError, ModelConfig, TrainConfig, TrialSpec
from searchmaps.data import Corpus, DataError, ilr_val_batches
from searchmaps.model import LoopedLM
from searchmaps.presets import PRESETS, get_preset
from searchmaps.results import read_runs
from searchmaps.train import train_ladder, train_packed
from searchmaps.train.step import adamw, evaluate, make_optimizer, validation_batches

# ---------------------------------------------------------------------------- --init


def _weights(init: str, residual: str = "prenorm", seed: int = 0) -> dict:
    torch.manual_seed(seed)
    model = LoopedLM(ModelConfig(n_layers=4, d_model=128, n_heads=4, init=init, residual=residual))
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def test_init_normal_draws_every_matrix_at_0_02_and_scaled_shrinks_the_residual_projections():
    scaled, normal = _weights("scaled"), _weights("normal")
    residual = [k for k in normal if k.endswith(("proj.weight", "down.weight"))]
    assert len(residual) == 8
    for k in residual:
        assert normal[k].std().item() == pytest.approx(0.02, rel=0.05)
        assert scaled[k].std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
        assert torch.allclose(scaled[k], normal[k] * 8 ** -0.5)  # the same draw, scaled
    for k in normal.keys() - set(residual):  # the same draws elsewhere: one seed, one stream
        assert torch.equal(scaled[k], normal[k]), k
    # depth-mup never scaled its projections: either init gives it the same weights
    a, b = _weights("scaled", "depth-mup"), _weights("normal", "depth-mup")
    assert all(torch.equal(a[k], b[k]) for k in a)
    with pytest.raises(ConfigError, match="--init normal cannot combine with --residual deeploop"):
        ModelConfig(init="normal", residual="deeploop")
    with pytest.raises(ConfigError, match="--init must be one of scaled, normal"):
        ModelConfig(init="xavier")


# ---------------------------------------------------------------------------- --decay-gains


def _gain_group_decay(opt) -> set:
    return {g["weight_decay"] for g in opt.param_groups if all(p.dim() < 2 for p in g["params"])}


def test_decay_gains_puts_the_norm_gains_in_the_decayed_group_in_both_optimizer_paths():
    for decay, want in ((False, {0.0}), (True, {0.25})):
        spec = tiny_spec(weight_decay=0.25, decay_gains=decay)
        torch.manual_seed(0)
        model = LoopedLM(spec.model)
        assert _gain_group_decay(make_optimizer(model, spec)) == want
        # packed seeds: the weights stacked along a seed dimension, gains of rank 2
        params, _ = torch.func.stack_module_state([model, LoopedLM(spec.model)])
        stacked = adamw([p.detach().requires_grad_() for p in params.values()], spec, stacked=True)
        gains = [g for g in stacked.param_groups if all(p.dim() < 3 for p in g["params"])]
        assert {g["weight_decay"] for g in gains} == want and sum(len(g["params"]) for g in gains) == 5


def test_a_training_with_decay_gains_shrinks_the_gains(corpus):
    gains = {}
    for decay in (False, True):
        spec = tiny_spec(tokens=2048, lr=1e-2, weight_decay=5.0, decay_gains=decay, schedule="cosine")
        got = []
        train_ladder(spec, None, corpus, on_model=lambda m: got.append(m))
        gains[decay] = torch.cat([p.detach().flatten() for n, p in got[0].named_parameters() if p.dim() < 2])
    # 16 steps at lr 1e-2: decay 5 takes ~5 % a step off each gain; Adam alone moves a gain by at most 0.16
    assert gains[True].mean() < gains[False].mean() - 0.2
    assert (gains[False] - 1).abs().max() <= 0.16 + 1e-4


# ---------------------------------------------------------------------------- --micro-batch


def test_micro_batches_give_the_whole_batch_loss_curve_within_float_rounding(corpus):
    whole = train_ladder(tiny_spec(tokens=2048, seed=2), None, corpus)[0]
    micro = train_ladder(tiny_spec(tokens=2048, seed=2, micro_batch=2), None, corpus)[0]
    assert whole.ok and micro.ok and whole.steps == micro.steps == 16 and whole.tokens == micro.tokens
    assert micro.config_hash == whole.config_hash  # how a step is computed, not what
    assert micro.config["train.micro_batch"] == 2
    assert micro.train_loss == pytest.approx(whole.train_loss, rel=1e-5)
    for a, b in zip(whole.curve, micro.curve, strict=True):
        assert a["step"] == b["step"] and b["val_loss"] == pytest.approx(a["val_loss"], rel=1e-5)
    assert whole.val_loss != 0 and micro.val_loss == pytest.approx(whole.val_loss, rel=1e-5)


def test_packed_seeds_accumulate_micro_batches_too(corpus):
    specs = [tiny_spec(tokens=1024, seed=s) for s in (0, 1)]
    whole = train_packed(specs, None, corpus)
    micro = train_packed([dataclasses.replace(s, train=dataclasses.replace(s.train, micro_batch=2)) for s in specs],
                         None, corpus)
    for a, b in zip(whole, micro, strict=True):
        assert a.ok and b.ok and a.seed == b.seed and b.packed == 2
        assert b.val_loss == pytest.approx(a.val_loss, rel=1e-5)
        assert b.train_loss == pytest.approx(a.train_loss, rel=1e-5)


def test_a_micro_batch_must_divide_the_batch():
    with pytest.raises(ConfigError, match="--micro-batch 3 does not divide --batch-size 4"):
        TrainConfig(batch_size=4, micro_batch=3)
    with pytest.raises(ConfigError, match="--micro-batch must be"):
        TrainConfig(micro_batch=-1)


# ---------------------------------------------------------------------------- --eval-protocol ilr


def _corpus(n_val: int) -> Corpus:
    val = (np.arange(n_val) * 7 % 251).astype(np.uint16)
    train = (np.arange(20_000) * 3 % 251).astype(np.uint16)
    return Corpus("hand", train, val, 256, "bin", "0" * 12)


def test_ilr_evaluation_scores_exactly_the_first_seq_len_tokens_of_each_4096_token_sequence():
    corpus = _corpus(3 * 4096 + 1000)  # three whole sequences; the tail is no sequence
    batches = ilr_val_batches(corpus, batch_size=2, seq_len=8, max_tokens=10_000)
    assert [len(x) for x, _ in batches] == [2, 1]
    xs, ys = torch.cat([x for x, _ in batches]), torch.cat([y for _, y in batches])
    val = torch.from_numpy(corpus.val.astype(np.int64))
    for k in range(3):
        assert torch.equal(xs[k], val[k * 4096:k * 4096 + 7]) and torch.equal(ys[k], val[k * 4096 + 1:k * 4096 + 8])
    assert len(ilr_val_batches(corpus, 2, 8, max_tokens=16)) == 1  # 16 tokens: two sequences' first 8
    # through the trainer's evaluation: the mean next-token loss inside each sequence's first seq_len tokens
    spec = tiny_spec(eval_protocol="ilr")  # eval_tokens 512: 16 sequences asked, 3 there
    torch.manual_seed(0)
    model = LoopedLM(spec.model)
    got = evaluate(model, validation_batches(corpus, spec), "cpu", "fp32")
    with torch.no_grad():
        losses = [torch.nn.functional.cross_entropy(model(val[k * 4096:k * 4096 + 31][None])[0][0],
                                                    val[k * 4096 + 1:k * 4096 + 32], reduction="none")
                  for k in range(3)]
    assert got == pytest.approx(torch.cat(losses).mean().item(), rel=1e-6)
    assert got != pytest.approx(evaluate(model, validation_batches(corpus, tiny_spec()), "cpu", "fp32"))


def test_ilr_evaluation_needs_one_whole_sequence():
    with pytest.raises(DataError, match="--eval-protocol ilr needs at least one 4,096-token sequence"):
        ilr_val_batches(_corpus(4095), 2, 8, 512)
    with pytest.raises(ConfigError, match="--eval-protocol must be one of windows, ilr"):
        TrainConfig(eval_protocol="heldout")
    with pytest.raises(ConfigError, match="--eval-protocol ilr scores the first --seq-len tokens"):
        TrialSpec(model=ModelConfig(seq_len=8192, max_positions=8192), train=TrainConfig(eval_protocol="ilr"))


# ---------------------------------------------------------------------------- committed studies keep their hashes


def test_configurations_from_before_the_options_keep_their_hash_and_protocol():
    runs = read_runs(ROOT / "results" / "ilr-table1-rope-ladder" / "runs.csv")
    assert runs and all("model.init" not in r.config for r in runs)  # written before the options existed
    for r in runs[:20]:
        spec = TrialSpec.from_dict(dict(r.config))
        assert spec.model.init == "scaled" and not spec.train.decay_gains and spec.train.eval_protocol == "windows"
        assert spec.config_hash() == r.config_hash
    spec = TrialSpec.from_dict(dict(runs[0].config))
    normal = dataclasses.replace(spec, model=dataclasses.replace(spec.model, init="normal"))
    assert normal.config_hash() != spec.config_hash()
    for change, same in ((dict(decay_gains=True), False), (dict(eval_protocol="ilr"), False),
                         (dict(micro_batch=4), True)):
        other = dataclasses.replace(spec, train=dataclasses.replace(spec.train, **change))
        assert (other.config_hash() == spec.config_hash()) is same, change
    assert dataclasses.replace(spec, preset="ilr-small").config_hash() == spec.config_hash()
    # the protocol a resumed search compares holds the committed study's keys, no new ones at their defaults
    info = json.loads((ROOT / "results" / "ilr-table1-rope-ladder" / "study.json").read_text())
    args = build_search_parser().parse_args(["--space", "ilr-table1", "--budget-flops", "4.8e6", "--dry-run",
                                             "--study", "ilr-table1-rope-ladder", "--results-dir", str(ROOT / "results")])
    protocol = build_plan(args).protocol()  # resumed without --eval-protocol: the study's windows, recorded by omission
    assert protocol["train"].keys() == info["train"].keys() and protocol["model"].keys() == info["model"].keys()
    assert "preset" not in protocol


# ---------------------------------------------------------------------------- --preset


def _text(path, n_words: int = 100_000) -> None:
    """Text of made-up words (Zipf-distributed, from 3,000 words of 1-4 syllables): enough
    for a BPE of 1,024 and a validation split of a few 4,096-token sequences."""
    rng = np.random.default_rng(0)
    syllables = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"]
    words = ["".join(rng.choice(syllables, size=rng.integers(1, 5))) for _ in range(3000)]
    weights = 1 / np.arange(1, len(words) + 1)
    chosen = rng.choice(words, size=n_words, p=weights / weights.sum())
    path.write_text("\n".join(" ".join(chosen[i:i + 12]) + "." for i in range(0, n_words, 12)) + "\n")


PRESET_MODEL = {"n_layers": 4, "d_model": 128, "n_heads": 4, "ffn_hidden": 512, "seq_len": 1024, "max_positions": 1024,
                "init": "normal", "vocab_size": 1024}
PRESET_TRAIN = {"lr": 3e-3, "beta1": 0.9, "beta2": 0.999, "weight_decay": 0.01, "decay_gains": True, "grad_clip": 1.0,
                "schedule": "cosine", "warmup_frac": 0.1, "min_lr_frac": 0.0, "batch_size": 64, "micro_batch": 8,
                "eval_protocol": "ilr", "sampling": "epoch"}


@pytest.mark.e2e
def test_the_ilr_small_preset_trains_and_every_row_reads_back_its_recipe(tmp_path):
    text, runs = tmp_path / "prose.txt", tmp_path / "runs.csv"
    _text(text)
    env = {**__import__("os").environ, "SEARCHMAPS_CACHE": str(tmp_path / "cache")}
    common = ("--preset", "ilr-small", "--data", text, "--compile", "off", "--precision", "fp32", "--quiet",
              "--runs", runs)
    # context 1,024 as the preset sets it, a batch of 4 in micro-batches of 2 (two steps); then the
    # preset's batch of 64 in its micro-batches of 8 at a short context (one step)
    first = run_cli("train", *common, "--batch-size", "4", "--micro-batch", "2", "--tokens", "8192", env=env)
    assert first.returncode == 0, first.stderr
    second = run_cli("train", *common, "--seq-len", "32", "--tokens", "2048", env=env)
    assert second.returncode == 0, second.stderr
    long, short = read_runs(runs)
    for row, overridden in ((long, {"batch_size": 4, "micro_batch": 2}), (short, {"seq_len": 32})):
        assert row.ok and row.config["preset"] == "ilr-small" and "bpe1024" in row.config["data"]
        model = {**PRESET_MODEL, **{k: v for k, v in overridden.items() if k in PRESET_MODEL}}
        train = {**PRESET_TRAIN, **{k: v for k, v in overridden.items() if k in PRESET_TRAIN}}
        assert {k: row.config[f"model.{k}"] for k in model} == model
        assert {k: row.config[f"train.{k}"] for k in train} == train
    assert long.tokens == 8192 and long.steps == 2 and short.tokens == 64 * 32 and short.steps == 1
    # ILR's protocol: the first 1,024 tokens of each 4,096-token validation sequence
    assert len(long.curve) >= 1 and math.isfinite(long.val_loss)


def test_the_presets_state_ilrs_horizon_and_ilr_large_is_ilrs_large_recipe():
    small, large = get_preset("ilr-small"), get_preset("ilr-large")
    # ILR's small runs: one epoch of a 500 M-token split, shuffled rows; its large runs: six, at lr 1e-3, 2 % warm-up
    assert (small["train"]["tokens"], small["train"]["sampling"]) == (500_000_000, "epoch")
    assert {k: large["train"][k] for k in ("lr", "warmup_frac", "tokens", "sampling")} == \
        {"lr": 1e-3, "warmup_frac": 0.02, "tokens": 3_000_000_000, "sampling": "epoch"}
    same = {k: v for k, v in large["train"].items() if k not in ("lr", "warmup_frac", "tokens")}
    assert same == {k: v for k, v in small["train"].items() if k not in ("lr", "warmup_frac", "tokens")}
    assert large["tokenizer"] == "bpe:32000"
    assert {k: large["model"][k] for k in ("n_layers", "d_model", "n_heads", "ffn_hidden")} == \
        {"n_layers": 8, "d_model": 768, "n_heads": 8, "ffn_hidden": 3072}
    for name in PRESETS:  # every preset is a valid configuration
        p = get_preset(name)
        TrialSpec(model=ModelConfig(**p["model"]), train=TrainConfig(**p["train"]))


# ---------------------------------------------------------------------------- --preset ilr-micro


def test_ilr_micro_is_ilr_smalls_recipe_but_for_width_data_horizon_and_evaluation():
    small, micro = get_preset("ilr-small"), get_preset("ilr-micro")
    # width: d 64, 2 heads of 32, SwiGLU 256; everything else of the model as ILR's
    assert {k: v for k, v in micro["model"].items() if k not in ("d_model", "n_heads", "ffn_hidden")} == \
        {k: v for k, v in small["model"].items() if k not in ("d_model", "n_heads", "ffn_hidden")}
    assert (micro["model"]["d_model"], micro["model"]["n_heads"], micro["model"]["ffn_hidden"]) == (64, 2, 256)
    # the recipe item by item: optimiser, schedule, batch, sampling; the horizon and evaluation replaced
    changed = ("tokens", "eval_protocol", "eval_tokens")
    assert {k: v for k, v in micro["train"].items() if k not in changed} == \
        {k: v for k, v in small["train"].items() if k not in changed}
    assert {k: micro["train"][k] for k in PRESET_TRAIN if k != "eval_protocol"} == \
        {k: v for k, v in PRESET_TRAIN.items() if k != "eval_protocol"}
    assert micro["tokenizer"] == small["tokenizer"] == "bpe:1024"
    assert (micro["data"], small["data"]) == ("english-large", None)
    # the horizon: 85 tokens per parameter of the model it trains, in whole 65,536-token updates
    params = LoopedLM(ModelConfig(**micro["model"], vocab_size=1024)).num_params()
    per_update = micro["train"]["batch_size"] * micro["model"]["seq_len"]
    assert params == 328_256 and per_update == 65_536
    assert micro["train"]["tokens"] == math.ceil(85 * params / per_update) * per_update == 27_918_336
    assert 85 <= micro["train"]["tokens"] / params < 85 + per_update / params
    # the evaluation: stratified, at least 1 M tokens, a window in each of english-large's 2,278 held-out documents
    assert micro["train"]["eval_protocol"] == "stratified" and micro["train"]["eval_tokens"] == 2_359_296
    assert micro["train"]["eval_tokens"] >= 2 ** 20 and micro["train"]["eval_tokens"] // 1024 >= 2_278


def test_ilr_micros_evaluation_scores_every_document_and_a_split_smaller_than_it_whole(corpus):
    from searchmaps.data import stratified_val_batches
    from searchmaps.data.documents import stratified_starts

    eval_tokens = get_preset("ilr-micro")["train"]["eval_tokens"]
    # english-large's held-out split: 4,814,001 tokens in 2,278 documents (here of random lengths)
    docs = np.sort(np.random.default_rng(0).choice(np.arange(1, 4_814_001), 2_277, replace=False))
    docs = np.concatenate([[0], docs])
    starts = stratified_starts(4_814_001, docs, 1024, eval_tokens // 1024)
    assert len(starts) == 2_304 and len(np.unique(np.searchsorted(docs, starts, side="right"))) == 2_278
    # a held-out split below 2.4 M tokens (stdlib's) is scored end to end, every whole window once
    batches = stratified_val_batches(corpus, 8, 1024, eval_tokens)
    assert sum(len(x) for x, _ in batches) == (len(corpus.val) - 1) // 1024 < eval_tokens // 1024


def test_ilr_micro_names_its_corpus_unless_data_is_given():
    from searchmaps.cli.flags import data_of
    from searchmaps.cli.train import build_parser as build_train_parser, spec_from_args

    for parse in (build_train_parser().parse_args,
                  lambda flags: build_search_parser().parse_args(["--budget-flops", "1e9", *flags])):
        assert data_of(parse(["--preset", "ilr-micro"])) == "english-large"
        assert data_of(parse(["--preset", "ilr-micro", "--data", "stdlib"])) == "stdlib"  # given: kept, default or not
        assert data_of(parse(["--preset", "ilr-small"])) == data_of(parse([])) == "stdlib"  # none named: the default
    args = build_train_parser().parse_args(["--preset", "ilr-micro", "--attention", "sdpa"])
    assert spec_from_args(args).data == "english-large"


def test_ilr_micro_with_d_model_or_tokens_is_overridden_and_the_plan_records_it(tmp_path):
    args = build_search_parser().parse_args(["--space", "ilr4", "--budget-flops", "2e7", "--preset", "ilr-micro",
                                             "--d-model", "128", "--heads", "4", "--tokens", "2e5", "--dry-run",
                                             "--results-dir", str(tmp_path)])
    plan = build_plan(args)
    model, train = plan.space.model, plan.space.train
    assert (model.d_model, model.n_heads, model.ffn_hidden, model.seq_len) == (128, 4, 256, 1024)  # SwiGLU: preset
    assert train.tokens == 200_000 and train.eval_protocol == "stratified" and train.eval_tokens == 2_359_296
    protocol = plan.protocol()
    assert protocol["preset"] == "ilr-micro" and protocol["model"]["d_model"] == 128 and protocol["tokens"] == 200_000
    spec = plan.spec(plan.candidates[0], 0)
    assert spec.preset == "ilr-micro" and spec.to_dict()["model.d_model"] == 128


def test_ilr_micro_with_flags_over_it_trains_and_the_row_records_them(tmp_path, capsys):
    """A real training of the preset, shrunk by flags to seconds: the row holds the preset's
    name, its values and the flags' over them."""
    from searchmaps.train.__main__ import main

    runs = tmp_path / "runs.csv"
    assert main(["--preset", "ilr-micro", "--data", "stdlib", "--tokenizer", "bytes", "--d-model", "32",
                 "--seq-len", "64", "--batch-size", "4", "--micro-batch", "2", "--tokens", "512", "--eval-tokens",
                 "256", "--compile", "off", "--precision", "fp32", "--attention", "sdpa", "--quiet",
                 "--runs", str(runs)]) == 0, capsys.readouterr().err
    (row,) = read_runs(runs)
    assert row.ok and row.config["preset"] == "ilr-micro" and row.config["data"] == "stdlib"
    assert {k: row.config[f"model.{k}"] for k in ("d_model", "n_heads", "ffn_hidden", "seq_len", "init")} == \
        {"d_model": 32, "n_heads": 2, "ffn_hidden": 256, "seq_len": 64, "init": "normal"}
    assert {k: row.config[f"train.{k}"] for k in ("tokens", "eval_protocol", "eval_tokens", "lr", "sampling")} == \
        {"tokens": 512, "eval_protocol": "stratified", "eval_tokens": 256, "lr": 3e-3, "sampling": "epoch"}
    assert row.steps == 2 and row.tokens == 512


BAD = [(["--preset", "ilr-tiny"], "--preset ilr-tiny does not exist"),
       (["--preset", "ilr-small", "--max-positions", "512"], "--max-positions 512 is below the context of 1024"),
       (["--batch-size", "4", "--micro-batch", "3"], "--micro-batch 3 does not divide --batch-size 4"),
       (["--micro-batch", "0"], "--micro-batch must be a positive number"),
       (["--init", "xavier"], "--init must be one of"),
       (["--eval-protocol", "heldout"], "--eval-protocol must be one of")]


@pytest.mark.parametrize("flags,message", BAD, ids=[b[1][:20] for b in BAD])
def test_bad_recipe_flags_are_one_line_and_exit_2(tmp_path, capsys, flags, message):
    from searchmaps.train.__main__ import main

    runs = tmp_path / "runs.csv"
    assert main([*flags, "--tokens", "2048", "--runs", str(runs), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not runs.exists()


def test_the_search_takes_a_preset_and_writes_it_to_study_json(tmp_path, capsys):
    from searchmaps.run import main

    assert main(["--space", "ilr4", "--budget-flops", "1e9", "--preset", "ilr-large", "--results-dir",
                 str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "--preset ilr-large has 8 layers but space ilr4 has 4" in err and err.count("\n") == 1
    assert main(["--space", "ilr4", "--budget-flops", "1e9", "--preset", "nope", "--results-dir", str(tmp_path)]) == 2
    assert "--preset nope does not exist" in capsys.readouterr().err and not any(tmp_path.iterdir())
    args = build_search_parser().parse_args(["--space", "ilr4", "--budget-flops", "2e7", "--preset", "ilr-small",
                                             "--lr", "1e-3", "--dry-run", "--results-dir", str(tmp_path)])
    plan = build_plan(args)
    assert plan.space.model.seq_len == 1024 and plan.space.train.lr == 1e-3 and plan.space.train.decay_gains
    assert plan.space.train.tokens == 500_000_000 and plan.space.train.sampling == "epoch"  # the preset's horizon
    shorter = build_plan(build_search_parser().parse_args(["--space", "ilr4", "--budget-flops", "2e7", "--preset",
                                                           "ilr-small", "--tokens", "2e5", "--sampling", "windows",
                                                           "--dry-run", "--results-dir", str(tmp_path)]))
    assert shorter.space.train.tokens == 200_000 and shorter.space.train.sampling == "windows"
    assert plan.protocol()["preset"] == "ilr-small" and plan.protocol()["model"]["init"] == "normal"
    spec = plan.spec(plan.candidates[0], 0)
    assert spec.preset == "ilr-small" and spec.train.eval_protocol == "ilr" and spec.train.micro_batch == 8
    plan.study_dir.mkdir(parents=True)
    assert json.loads(plan.write_study_json().read_text())["preset"] == "ilr-small"


def test_the_report_names_ilrs_choices_where_the_rows_made_them():
    import pandas as pd

    from searchmaps.report.protocol import recipe_sentence

    spec = TrialSpec(model=ModelConfig(**{**get_preset("ilr-small")["model"], "vocab_size": 1024}),
                     train=TrainConfig(**get_preset("ilr-small")["train"]), preset="ilr-small")
    ok = pd.DataFrame({"candidate": ["1,1,1,1|rope"], "steps": [30]})
    text = recipe_sentence([spec.to_dict()], ok)
    assert ("cosine decay to 0 after 10 % warm-up; 64 sequences × 1024 tokens = 65,536 tokens per update (8 sequences "
            "per forward pass, gradients accumulated), 30 steps; weight decay on every parameter, norm gains included; "
            "N(0, 0.02) initialisation for every matrix; validation on the first 1,024 tokens of each held-out "
            "4,096-token sequence;") in text
    plain = recipe_sentence([TrialSpec().to_dict()], ok)  # the defaults go unsaid, as before the options existed
    assert "norm gains" not in plain and "initialisation" not in plain and "per forward pass" not in plain


def test_ilr_evaluation_scores_every_held_out_row_up_to_ilr_count():
    """ILR's rule with --eval-tokens asking for all of them: as many 4,096-token rows as the split
    holds (each its first seq_len tokens), and never more than ILR's own count."""
    from searchmaps.data.batches import ILR_EVAL_ROWS

    few = _corpus(37 * 4096 + 5)
    rows = sum(len(x) for x, _ in ilr_val_batches(few, 64, 8, max_tokens=10 ** 9))
    assert rows == 37
    many = Corpus("many", few.train, np.zeros((ILR_EVAL_ROWS + 3) * 4096, np.uint16), 256, "bin", "0" * 12)
    batches = ilr_val_batches(many, 512, 4, max_tokens=10 ** 9)
    assert sum(len(x) for x, _ in batches) == ILR_EVAL_ROWS
    assert sum(y.numel() for _, y in batches) == ILR_EVAL_ROWS * 3  # seq_len - 1 targets a row
    assert sum(len(x) for x, _ in ilr_val_batches(many, 512, 4, max_tokens=40)) == 10  # fewer asked: fewer


def test_eval_every_reaches_a_search_and_a_training_alike(tmp_path):
    """--eval-every is one flag of searchmaps.run and searchmaps.train (a large held-out set makes
    each curve point cost what a stretch of training does): it enters the plan's recipe and the
    protocol a resumed study compares; a horizon's end is scored whatever its value."""
    from searchmaps.cli.train import build_parser as build_train_parser, spec_from_args
    from searchmaps.schedule import make_ladder

    args = build_search_parser().parse_args(["--space", "ilr4", "--budget-flops", "2e7", "--preset", "ilr-micro",
                                             "--tokens", "131072,524288", "--schedule", "wsd", "--eval-every",
                                             "1000", "--dry-run", "--results-dir", str(tmp_path)])
    plan = build_plan(args)
    assert plan.space.train.eval_every == 1000 and plan.protocol()["train"]["eval_every"] == 1000
    spec = plan.spec(plan.candidates[0], 0)
    ladder = make_ladder(spec, plan.ladder)
    assert [ladder.eval_steps(r) for r in range(2)] == [[2], [8]]  # the rungs' ends only
    default = build_plan(build_search_parser().parse_args(["--space", "ilr4", "--budget-flops", "2e7", "--dry-run",
                                                           "--results-dir", str(tmp_path)]))
    assert "eval_every" not in default.protocol()["train"] or default.protocol()["train"]["eval_every"] == 0
    train_args = build_train_parser().parse_args(["--preset", "ilr-micro", "--attention", "sdpa", "--eval-every", "7"])
    assert spec_from_args(train_args).train.eval_every == 7
