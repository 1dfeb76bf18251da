"""The code passes the project's linter (ruff, configured in pyproject.toml: rules and line length)."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "concise", str(ROOT)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT, check=False)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]


def test_the_installed_node_carries_no_attack_tooling():
    """The attack catalogue (bench/hostile.py) stays outside the package volunteers install: no module of node/ or
    protocol/ imports it, and the package's sources hold no attack builder."""
    import ast

    offenders = []
    for package in ("node", "protocol"):
        for path in (ROOT / package).rglob("*.py"):
            tree = ast.parse(path.read_text(), filename=str(path))
            for node in ast.walk(tree):
                names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                         else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
                if any(name == "hostile" or name.endswith(".attacks") or name == "attacks" for name in names):
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if "class HostileDHT" in path.read_text():
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
    assert (ROOT / "bench" / "hostile.py").exists()
