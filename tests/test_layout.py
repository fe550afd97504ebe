"""The house: modules import only downward (the order below, which docs/architecture.md
follows), nothing imports in a circle, no library module imports a
command module and no room (a package with its ``__main__``) imports anything that imports
it back, Ray and Optuna stay in their rooms, and no module reaches into another's private
names or Optuna's."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "searchmaps"

# pipeline order, lowest first: a module may import only modules before it
ORDER = ["encodings", "config", "presets", "device", "flops", "faults", "model", "bpe", "english", "data", "schedule", "spaces", "results", "objectives", "stats",
         "topgroup.critical", "topgroup.rule", "topgroup.rules.friedman", "topgroup.rules.holm", "topgroup.rules.hsd",
         "topgroup.rules.mcb", "topgroup.rules.moderated", "topgroup.rules", "topgroup.power", "topgroup.analysis",
         "topgroup", "racing", "stability",
         "train", "train.step", "train.exit", "train.records", "train.ladder", "train.packed", "supernet.distill",
         "supernet.finetune", "supernet", "supernet.fair", "supernet.split", "supernet.landmarks", "scheduler", "ledger",
         "samplers", "plan", "audit",
         "supernet.prescreen", "supernet.tuning", "report.section", "report.sentences",
         "report.figures", "report.summary", "report.page", "report.ranking", "report.planned", "report.horizons",
         "report.tuning", "report.exit", "report.supernet", "report.write", "report", "report.terminal", "study", "driver", "executor",
         "cli", "search", "train.__main__", "report.__main__", "run", "supernet.__main__"]
# the command layer: flags, exit codes and the terminal; a library module never imports one
COMMANDS = {"cli", "search", "run"}
ONLY_HERE = {"ray": {"executor"}, "optuna": {"study"}, "optuna_dashboard": {"study"}}


def modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts:
            out[".".join(parts)] = path
    return out


def imports(name: str, path: Path):
    """(imported searchmaps module, imported names, top-level third-party package) of every
    import statement, at any depth of the file."""
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[: len(pkg) - (node.level - 1)] + (node.module.split(".") if node.module else [])
                target = ".".join(base)
                names = [a.name for a in node.names]
                if not node.module:  # from . import x, y: modules or names of the package
                    for a in names:
                        yield (f"{target}.{a}" if f"{target}.{a}" in MODULES else target or a), [a], None
                    continue
                yield target, names, None
            else:
                yield None, [a.name for a in node.names], node.module.split(".")[0]
        elif isinstance(node, ast.Import):
            for a in node.names:
                yield None, [], a.name.split(".")[0]


MODULES = modules()


def test_the_order_names_every_module():
    assert sorted(MODULES) == sorted(ORDER)


def test_imports_run_down_only_so_there_is_no_circle():
    rank = {m: i for i, m in enumerate(ORDER)}
    wrong = []
    for name, path in MODULES.items():
        for target, _, _ in imports(name, path):
            if target is None or target == name:
                continue
            if target.startswith(name + "."):  # a package importing its own submodules
                continue
            if rank[target] >= rank[name]:
                wrong.append(f"{name} -> {target}")
    assert not wrong, wrong


def is_command(name: str) -> bool:
    return name in COMMANDS or name.endswith("__main__")


def room(name: str) -> str:
    """The room a module belongs to: its top-level module or package, ``__main__`` included."""
    return name.split(".")[0]


def test_no_library_module_imports_a_command_module():
    wrong = [f"{name} -> {target}" for name, path in MODULES.items() if not is_command(name)
             for target, _, _ in imports(name, path) if target is not None and is_command(target)]
    assert not wrong, wrong


def test_no_room_imports_what_imports_it_back():
    """A package's ``__main__`` importing a module that imports the package's library is an
    arrow back up the layout (train.__main__ -> cli -> train once): rooms form no circle."""
    graph = {}
    for name, path in MODULES.items():
        for target, _, _ in imports(name, path):
            if target is not None and room(target) != room(name):
                graph.setdefault(room(name), set()).add(room(target))

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            r = todo.pop()
            if r == goal:
                return True
            if r not in seen:
                seen.add(r)
                todo += graph.get(r, ())
        return False

    back = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets if reaches(b, a))
    assert not back, back


def test_ray_and_optuna_are_imported_only_in_their_rooms():
    for name, path in MODULES.items():
        for _, _, package in imports(name, path):
            if package in ONLY_HERE:
                assert name in ONLY_HERE[package], f"{name} imports {package}"


def test_no_module_imports_another_modules_private_names():
    for name, path in MODULES.items():
        for target, names, _ in imports(name, path):
            if target is not None:
                assert not [n for n in names if n.startswith("_")], f"{name} imports {names} from {target}"


def test_no_use_of_optunas_private_attributes():
    private = {"_storage", "_study_id", "_trial_id", "_backend", "_get_stale_trial_ids"}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                assert node.attr not in private, f"{name} uses .{node.attr}"


def test_every_flag_of_every_command_says_what_it_does():
    """`--help` is the flag reference the docs point at: no entry without its text."""
    import argparse

    from searchmaps.cli import build_search_parser, build_train_parser

    for parser in (build_search_parser(), build_train_parser()):
        bare = [a.option_strings[0] for a in parser._actions
                if a.option_strings and not a.help and not isinstance(a, argparse._HelpAction)]
        assert not bare, f"{parser.prog}: {bare}"
