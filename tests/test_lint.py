"""The code passes the project's linter (ruff, configured in pyproject.toml: rules and line length)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = [sys.executable, "-c",  # import-linter's `lint-imports`, from this interpreter
                "import sys; from importlinter.cli import lint_imports_command as c; sys.exit(c())"]


def test_ruff_finds_nothing():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def imports_of_the_package():
    """(file, line, imported module) of every import in node/ and protocol/, those inside functions included."""
    import ast

    for package in ("node", "protocol"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                for name in names:
                    yield str(path.relative_to(ROOT)), node.lineno, name


def test_the_installed_node_carries_no_attack_tooling():
    """The attack tooling (bench/attacks/hostile.py) stays outside the package volunteers install: no module of node/ or
    protocol/ imports it, and the package's sources hold no attack builder."""
    offenders = [f"{path}:{line}" for path, line, name in imports_of_the_package()
                 if name == "hostile" or name.endswith(".attacks") or name == "attacks"]
    offenders += [str(path.relative_to(ROOT)) for package in ("node", "protocol")
                  for path in (ROOT / package).rglob("*.py") if "class HostileDHT" in path.read_text()]
    assert offenders == []
    assert (ROOT / "bench" / "attacks" / "hostile.py").exists()


def test_hivemind_is_imported_by_one_module():
    """node/swarm/dht.py is hivemind's only importer (README's Layout): the rest of the node reaches the DHT
    library through it, imports inside functions included."""
    importers = {path for path, _, name in imports_of_the_package() if name.split(".")[0] == "hivemind"}
    assert importers == {"node/swarm/dht.py"}


def test_the_import_contracts_hold():
    """The layers, the wire format's and the trust boundary's independence and no cycles ([tool.importlinter] in
    pyproject.toml), checked by import-linter; a broken contract fails with its name."""
    out = subprocess.run([*LINT_IMPORTS, "--no-cache"], capture_output=True, text=True, timeout=300, cwd=ROOT,
                         check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert "6 kept, 0 broken" in out.stdout


def test_an_import_against_the_layers_fails_with_the_contracts_name(tmp_path):
    """The contracts can fail: the node with the trust boundary's reader importing the peer, its group boundary
    the network, or the transfer room the sender ledger, breaks them."""
    import shutil

    for part in ("node", "protocol"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("zoo_weights", "__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    with open(tmp_path / "node" / "swarm" / "intake.py", "a") as handle:
        handle.write("\nimport node.peer  # noqa: E402,F401\n")
    with open(tmp_path / "node" / "swarm" / "boundary.py", "a") as handle:  # and the group boundary the network
        handle.write("\nimport node.swarm.dht  # noqa: E402,F401\n")
    with open(tmp_path / "node" / "rl" / "transfer" / "guard.py", "a") as handle:  # and the room the swarm
        handle.write("\nimport node.swarm.senders  # noqa: E402,F401\n")
    out = subprocess.run([*LINT_IMPORTS, "--no-cache"], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}, check=False)
    assert out.returncode != 0
    assert "the trust boundary's readers (codec, intake) import nothing" in out.stdout.replace("\n", " ")
    assert "node.swarm.intake -> node.peer" in out.stdout
    assert "the trust boundary (boundary: bytes in" in out.stdout
    assert "node.swarm.boundary -> node.swarm.dht" in out.stdout
    assert "the transfer room (what a received group teaches) sits below the learner" in out.stdout.replace("\n", " ")
    assert "node.rl.transfer.guard -> node.swarm.senders" in out.stdout


def test_nothing_in_the_project_points_outside_it():
    """Issue 56: the project carries its own specification; no file tracked in it names documents that a user
    who clones it does not have (a workspace's shared notes beside the repository)."""
    tracked = subprocess.run(["git", "ls-files"], capture_output=True, text=True, cwd=ROOT, check=False).stdout.split()
    if not tracked:  # (not a git checkout: every text file under the project instead)
        tracked = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file() and ".venv" not in p.parts]
    outside = tuple("".join(parts) for parts in (("../", "shared"), ("shared/", "docs"), ("FIELD-", "NOTES"),
                                                 ("DESIGN", ".md")))  # (spelt in pieces: this file names none)
    found = []
    for name in tracked:
        path = ROOT / name
        if path.suffix in (".png", ".safetensors", ".bin", ".gguf", ".pt", ".json") or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        found += [f"{name}: {mark}" for mark in outside if mark in text]
    assert found == []
