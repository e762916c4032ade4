"""What the wheels hold: l4-plugin ships no simulator and no test-only code; its ``simulate`` extra
brings the l4-simulate distribution; l4_plugin imports without the simulator. No server needed.

The wheels are built in-process with the build backend (hatchling), as pip would build them.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
import zipfile
from pathlib import Path
from urllib.parse import unquote, urlparse

import pytest
from hatchling.builders.wheel import WheelBuilder

ROOT = Path(__file__).resolve().parents[2]
SIMULATOR = ROOT / "simulate"


def _build(root: Path, out: Path) -> zipfile.ZipFile:
    (wheel,) = WheelBuilder(str(root)).build(directory=str(out), versions=["standard"])
    return zipfile.ZipFile(wheel)


def _metadata(wheel: zipfile.ZipFile) -> list[str]:
    (name,) = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return wheel.read(name).decode("utf-8").splitlines()


@pytest.fixture(scope="module")
def plugin_wheel(tmp_path_factory: pytest.TempPathFactory) -> zipfile.ZipFile:
    return _build(ROOT, tmp_path_factory.mktemp("wheel"))


def test_plugin_wheel_holds_no_simulator(plugin_wheel: zipfile.ZipFile) -> None:
    names = plugin_wheel.namelist()
    assert "l4_plugin/cli/main.py" in names  # the wheel is the product, not an empty shell
    tops = {n.split("/", 1)[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"l4_plugin"}
    assert not [n for n in names if "simulate" in n.split("/")[:-1] or "l4_simulate" in n]
    # Same bytes under another name count too: no simulator module is copied into the wheel.
    sources = {hashlib.sha256(p.read_bytes()).hexdigest(): p.name for p in SIMULATOR.rglob("*.py")}
    assert len(sources) >= 10
    copied = [n for n in names if hashlib.sha256(plugin_wheel.read(n)).hexdigest() in sources]
    assert copied == []


def test_plugin_wheel_holds_no_test_only_code(plugin_wheel: zipfile.ZipFile) -> None:
    assert not [n for n in plugin_wheel.namelist() if n.endswith("/validation.py")]


def test_simulate_extra_brings_the_simulator_distribution(
    plugin_wheel: zipfile.ZipFile, tmp_path: Path
) -> None:
    metadata = _metadata(plugin_wheel)
    assert "Provides-Extra: simulate" in metadata
    (requirement,) = [m for m in metadata if m.startswith("Requires-Dist: l4-simulate")]
    assert requirement.endswith("extra == 'simulate'")
    url = requirement.split("@", 1)[1].split(";", 1)[0].strip()
    target = Path(unquote(urlparse(url).path))
    assert target == SIMULATOR
    simulator = _build(target, tmp_path)
    names = set(simulator.namelist())
    assert {"l4_simulate/__init__.py", "l4_simulate/generator.py"} <= names
    assert not [n for n in names if n.startswith("l4_plugin/")]
    assert "Name: l4-simulate" in _metadata(simulator)


def test_plugin_imports_without_the_simulator() -> None:
    # A fresh interpreter where ``import l4_simulate`` fails imports every l4_plugin module:
    # only ``l4 simulate`` itself may need the simulator, and only when it runs.
    code = (
        "import importlib, pkgutil, sys\n"
        "sys.modules['l4_simulate'] = None\n"
        "import l4_plugin\n"
        "names = [m.name for m in pkgutil.walk_packages(l4_plugin.__path__, 'l4_plugin.')\n"
        "         if not m.name.endswith('__main__')]  # running it is the CLI, not an import\n"
        "for name in names:\n"
        "    importlib.import_module(name)\n"
        "print(len(names))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) > 50
