"""Two drivers on one study write to the same Optuna trials: a write that reads a trial as
RUNNING and then finds it told by the other driver must not fail the driver (CI saw
``UpdateFinishedTrialError`` from a rung value, exit 1)."""

from helpers import record
from optuna.trial import TrialState

from searchmaps import flops
from searchmaps.config import ModelConfig
from searchmaps.ledger import Ledger, check_storage
from searchmaps.maps import Candidate, ReuseMap
from searchmaps.plan import SearchPlan
from searchmaps.spaces import load_space
from searchmaps.study import SearchStudy
from searchmaps.units import Finished, RungDone, Tuned

BUDGET = flops.flops_per_token(ModelConfig(n_layers=2, d_model=32, n_heads=2, seq_len=32).with_map("2,1"))


class ReadBeforeTheOtherTold(SearchStudy):
    """This driver's view of a trial's state as read just before the other driver told it:
    the interleaving of two processes, fixed in one order."""

    def state(self, number: int) -> TrialState:
        return TrialState.RUNNING


def test_a_rung_value_or_tuning_result_for_a_trial_another_driver_just_told_is_dropped_quietly(
        space_file, tmp_path):
    plan = SearchPlan(space=load_space(str(space_file)), budget_flops=float(BUDGET), study="race",
                      results_dir=tmp_path, seeds=2, maps=[ReuseMap.parse("2,1", 2)])
    plan.study_dir.mkdir()
    engine = check_storage(plan.storage_url)
    teller = SearchStudy(plan, Ledger(engine, plan.study))
    late = ReadBeforeTheOtherTold(plan, Ledger(engine, plan.study))
    cand = Candidate.from_label(plan.candidates[0].label, 2)
    number = teller.open(cand)
    rows = tuple(record(cand, seed=s, ppl=10.0 + s, horizon_target=1000) for s in range(2))
    assert teller.tell(Finished(cand, rows))
    told = teller.storage.get_trial(teller._id_of(number))
    assert told.state == TrialState.COMPLETE

    late.report_rung(RungDone(cand, 0, rows))  # raised UpdateFinishedTrialError before
    late.note_tuning(Tuned(cand, 1e-3, {1e-3: 2.3}, rows))
    after = late.storage.get_trial(late._id_of(number))
    assert after.state == TrialState.COMPLETE
    assert after.intermediate_values == told.intermediate_values and after.user_attrs == told.user_attrs

