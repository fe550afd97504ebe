"""Unit roles and ledger states are enums that are also their strings: every file and
table they reach (runs.csv, a record's JSON, the storage on SQLite and PostgreSQL) holds
exactly what the plain strings wrote, and what is read back is the enum."""

import csv
import io
import json
import math

import pytest
import sqlalchemy as sa

from searchmaps.config import Candidate, ReuseMap
from searchmaps.ledger import CandidateState, Ledger, candidates
from searchmaps.results import COLUMNS, ResultsError, Role, RunRecord, RunsFile, Status, read_runs
from searchmaps.scheduler import Unit


def record(role) -> RunRecord:
    return RunRecord(run_id="r1", map="2,1", pe="rope", seed=3, status=Status.OK, config_hash="h", role=role,
                     val_loss=1.0, val_ppl=math.e, curve=({"step": 1, "tokens": 8, "val_loss": 1.0},),
                     config={"model.n_layers": 2, "train.lr": 0.003})


@pytest.mark.parametrize("enum_type", [Role, CandidateState])
def test_each_member_is_its_string(enum_type):
    for member in enum_type:
        assert member == member.value and str(member) == f"{member}" == member.value
        assert json.dumps({"x": member}) == json.dumps({"x": member.value})
        assert hash(member) == hash(member.value) and {member} == {member.value}
        assert enum_type(member.value) is member


@pytest.mark.parametrize("role", list(Role))
def test_a_rows_role_is_written_as_its_string_and_read_back_as_the_enum(role, tmp_path):
    as_enum, as_text = record(role), record(role.value)
    assert as_text.role is role  # a plain string becomes the member
    assert as_enum.to_row() == as_text.to_row() and type(as_enum.to_row()["role"]) is str
    assert as_enum.to_json() == as_text.to_json() and json.loads(as_enum.to_json())["role"] == role.value
    runs = RunsFile(tmp_path / "runs.csv")
    runs.append([as_enum])
    text = (tmp_path / "runs.csv").read_text()
    row = next(csv.DictReader(io.StringIO(text)))
    assert row["role"] == role.value and list(row)[: len(COLUMNS)] == COLUMNS
    back = read_runs(tmp_path / "runs.csv")
    assert back[0].role is role and RunRecord.from_json(as_enum.to_json()).role is role


def test_an_unknown_role_in_a_file_is_one_line_naming_it(tmp_path):
    RunsFile(tmp_path / "runs.csv").append([record(Role.EVAL)])
    path = tmp_path / "runs.csv"
    lines = path.read_text().splitlines()
    header = lines[0].split(",")
    cells = next(csv.reader([lines[1]]))
    cells[header.index("role")] = "warmup"
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(cells)
    path.write_text(lines[0] + "\n" + buf.getvalue())
    with pytest.raises(ResultsError, match=r"runs.csv:2: unknown role 'warmup' \(one of eval, tuning\)"):
        read_runs(path)


def test_units_of_either_spelling_are_one_unit():
    cand = Candidate(ReuseMap((2, 1)), "rope")
    assert Unit(cand, 0, role=Role.TUNING, lr=1e-3) == Unit(cand, 0, role="tuning", lr=1e-3)
    assert len({Unit(cand, 0), Unit(cand, 0, role="eval")}) == 1


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'optuna.db'}"
    return request.getfixturevalue("postgres_url")


def test_the_storage_holds_the_states_as_their_strings(url):
    lg = Ledger(url, "s")
    lg.register()

    def stored():
        with lg.engine.begin() as conn:
            return conn.execute(sa.text("SELECT state, length(state) FROM searchmaps_candidates")).one()

    assert lg.register_candidate("c", 0).state is CandidateState.OPEN
    assert tuple(stored()) == ("open", 4) and lg.entry("c").state is CandidateState.OPEN
    assert lg.begin_tell("c")
    assert tuple(stored()) == ("telling", 7) and lg.entry("c").state is CandidateState.TELLING
    lg.end_tell("c")
    assert tuple(stored()) == ("told", 4) and lg.entries()[0].state is CandidateState.TOLD
    with lg.engine.begin() as conn:  # a state written as a plain string is read as the member
        conn.execute(candidates.update().values(state="open"))
    assert lg.entry("c").state is CandidateState.OPEN
