"""The house: modules import only downward (the order below, which docs/architecture.md
follows), nothing imports in a circle, no library module imports a
command module (the ``cli`` package and the ``python -m`` shims) and no room imports anything
that imports it back, Ray and Optuna stay in their rooms, and no module reaches into another's private
names or Optuna's; and no module is over 500 lines."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "searchmaps"

# pipeline order, lowest first: a module may import only modules before it
ORDER = ["attention", "encodings", "maps", "protocols", "config", "flops", "presets", "device", "faults", "model", "data.corpus", "data.cache", "data.documents", "data.split", "data.bpe", "data.english", "data.english_large", "data.named", "data.sources",
         "data.stage", "data.batches", "data.command", "data", "schedule", "spaces", "results.record", "results.file", "results", "objectives",
         "stats.procedures", "stats.paired", "stats.detectable", "stats.topgroup.critical", "stats.topgroup.rule",
         "stats.topgroup.rules.friedman", "stats.topgroup.rules.holm", "stats.topgroup.rules.hsd",
         "stats.topgroup.rules.mcb", "stats.topgroup.rules.moderated", "stats.topgroup.rules", "stats.topgroup.power",
         "stats.topgroup.noise", "stats.topgroup", "stats.racing", "stats.analysis", "stats.bootstrap", "stats.ranks",
         "stats.scaling", "stats.gaps", "stats.proxy", "stats.fidelity", "stats.compute", "stats.evalnoise", "stats",
         "train", "train.step", "train.exit", "train.records", "train.ladder", "train.stacked", "train.packed_step", "train.packed", "supernet.samplings.base", "supernet.samplings.uniform", "supernet.samplings.sandwich", "supernet.samplings.fair", "supernet.samplings", "supernet.method",
         "supernet.distill",
         "supernet.finetune", "supernet", "supernet.split", "supernet.landmarks", "units", "scheduler", "storage", "ledger",
         "samplers", "plan_parts", "plan", "audit",
         "supernet.prescreen", "supernet.tuning", "report.section", "report.sentences", "report.lead", "report.protocol",
         "report.figures", "report.summary", "report.page", "report.markdown", "report.ranking", "report.planned", "report.trends", "report.horizons", "report.compute",
         "report.tuning", "report.exit", "report.evaluation", "report.supernet", "report.write", "report.committed",
         "report.across", "report", "report.terminal", "study", "driver", "executor", "executor.local", "executor.reaper", "executor.tune", "search", "supernet.search",
         "cli", "cli.common", "cli.flags", "cli.search", "cli.data", "cli.report", "cli.train", "cli.run",
         "cli.supernet", "train.__main__", "report.__main__", "data.__main__", "run", "supernet.__main__"]
# the command layer: the cli package (flags, exit codes, one module per command) and the shims
# that run its commands as python -m searchmaps.<command>; a library module never imports one
COMMANDS = {"cli", "run"}
ONLY_HERE = {"ray": {"executor.tune"}, "optuna": {"study"}, "optuna_dashboard": {"study"}}


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


def script_only(tree: ast.Module) -> set[int]:
    """The nodes inside ``if __name__ == "__main__":``: what runs only when the file is the
    script (``python -m searchmaps.data`` reaching its command), never when it is imported."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare) \
                and isinstance(node.test.left, ast.Name) and node.test.left.id == "__name__":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def imports(name: str, path: Path):
    """(imported searchmaps module, imported names, top-level third-party package) of every
    import statement, at any depth of the file, except in its ``__main__`` block."""
    pkg = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    tree = ast.parse(path.read_text())
    skip = script_only(tree)
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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


MAX_LINES = 500  # a module longer than this holds more than one thing: split it along its seams


def test_no_module_is_over_the_line_limit():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"over {MAX_LINES} lines: {long}"


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
    return name.split(".")[0] in COMMANDS or name.endswith("__main__")


def room(name: str) -> str:
    """The room a module belongs to: its top-level module or package; a package's
    ``__main__`` (a shim nothing imports, running a command of ``cli``) is a room of its own."""
    return name if name.endswith("__main__") else name.split(".")[0]


def test_no_library_module_imports_a_command_module():
    wrong = [f"{name} -> {target}" for name, path in MODULES.items() if not is_command(name)
             for target, _, _ in imports(name, path) if target is not None and is_command(target)]
    assert not wrong, wrong


def test_no_room_imports_what_imports_it_back():
    """A module importing a room that imports its own room back is an arrow back up the
    layout (train.__main__ held the train command once, and imported cli, which imported
    train): rooms form no circle."""
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

    from searchmaps.cli import run, supernet, train

    for parser in (run.build_parser(), train.build_parser(), supernet.build_parser()):
        bare = [a.option_strings[0] for a in parser._actions
                if a.option_strings and not a.help and not isinstance(a, argparse._HelpAction)]
        assert not bare, f"{parser.prog}: {bare}"


# a flag two commands declare in their own modules, and why its default differs there
OWN_DECLARATIONS = {"--seeds": "searchmaps.run's per candidate (the space's) against searchmaps.train's (1)",
                    "--quiet": "no progress bar, in both"}


def test_a_flag_two_commands_share_is_declared_once():
    """A flag two commands take is declared once, in cli/flags.py (one type, one meaning),
    except the few listed above; the analysis flags searchmaps.run and searchmaps.report
    share parse alike (the report's --alpha and --target-tokens took any float before,
    run's a checked number)."""
    import re

    seen: dict[str, list[str]] = {}
    for name in ("run", "report", "train", "supernet", "data"):
        text = (PACKAGE / "cli" / f"{name}.py").read_text()
        for flag in set(re.findall(r'add_argument\(\s*"(--[a-z0-9-]+)"', text)):
            seen.setdefault(flag, []).append(name)
    twice = {f: m for f, m in seen.items() if len(m) > 1 and f not in OWN_DECLARATIONS}
    assert not twice, f"declare these in cli/flags.py: {twice}"

    from searchmaps.cli import report, run
    from searchmaps.cli.common import Parser

    def actions(parser):
        return {a.option_strings[0]: a for a in parser._actions if a.option_strings}

    p = Parser(prog="searchmaps.report")
    report.add_analysis_args(p, report=True)
    ours, theirs = actions(p), actions(run.build_parser())
    for flag in ("--alpha", "--top-group", "--planned", "--target-tokens", "--storage"):
        assert (ours[flag].type, ours[flag].choices, ours[flag].nargs) == \
               (theirs[flag].type, theirs[flag].choices, theirs[flag].nargs), flag


MUTATORS = {"insert", "append", "extend", "remove", "pop", "clear", "__setitem__", "__iadd__"}


def edits_sys_path(tree: ast.Module) -> bool:
    """The file changes ``sys.path``: assigns to it or to a slice of it, or calls one of its
    methods (``insert``, ``append``, ``extend``, ...), or ``site.addsitedir``."""
    def is_path(node) -> bool:
        node = node.value if isinstance(node, ast.Subscript) else node
        return isinstance(node, ast.Attribute) and node.attr == "path" \
            and isinstance(node.value, ast.Name) and node.value.id == "sys"

    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        if any(is_path(t) for t in targets):
            return True
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                (is_path(node.func.value) and node.func.attr in MUTATORS or node.func.attr == "addsitedir"):
            return True
    return False


def test_no_script_or_module_edits_sys_path():
    """The package, the committed studies' scripts, the experiments and the benchmarks import
    what they need as modules of the installed package (``searchmaps.report.committed``, the
    results folder's manifest, once a sibling put on the path by hand): a file run as a script
    or loaded by a test finds the same code either way."""
    root = PACKAGE.parent
    files = [p for top in ("searchmaps", "results", "experiments", "benchmarks") for p in (root / top).rglob("*.py")]
    assert len(files) > len(MODULES)
    wrong = [str(p.relative_to(root)) for p in files if edits_sys_path(ast.parse(p.read_text(encoding="utf-8")))]
    assert not wrong, f"edit sys.path: {wrong}"


def test_the_sys_path_check_sees_each_way_of_editing_it():
    for code in ("import sys\nsys.path.insert(0, 'x')", "import sys\nsys.path[:0] = ['x']", "import sys\nsys.path = []",
                 "import sys\nsys.path += ['x']", "import sys\nsys.path.append('x')", "import site\nsite.addsitedir('x')"):
        assert edits_sys_path(ast.parse(code)), code
    assert not edits_sys_path(ast.parse("import sys\nprint(sys.path[0])\nx = list(sys.path)\nsys.path.index('x')"))
