"""servecheck as an installed tool: the shipped suites, the plugin entry point, the fixtures.

The slow test builds the wheel, installs it into a new virtual environment outside the
repository and, from an empty folder, runs ``servecheck check``, ``pytest --pyargs
servecheck.suites`` and the documented example tests (docs/examples/pytest-plugin) against a
reference server started from that environment. The other tests keep the checkout's thin
entry points (suites/, scenarios/, loadtests/) in step with the packaged files.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

from servecheck.reference.inprocess import RunningServer

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "servecheck"
EXAMPLES = ROOT / "docs" / "examples" / "pytest-plugin"


def _code_lines(path: Path) -> list[str]:
    """The statements of a module without its docstring, as source text."""
    tree = ast.parse(path.read_text())
    body = tree.body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [ast.unparse(node) for node in body]


@pytest.mark.parametrize(
    ("top", "package", "extra"),
    [("suites", "suites", []), ("scenarios", "scenarios", ["import locust"])],
)
def test_checkout_entry_points_only_import_the_packaged_files(
    top: str, package: str, extra: list[str]
) -> None:
    shipped = sorted(p.stem for p in (PKG / package).glob("*.py") if not p.stem.startswith("_"))
    thin = sorted(p.stem for p in (ROOT / top).glob("*.py"))
    assert thin == shipped, (
        f"{top}/ and servecheck/{package}/ differ: a new file belongs in servecheck/{package}/, "
        f"with a thin {top}/<name>.py importing it"
    )
    for name in thin:
        assert _code_lines(ROOT / top / f"{name}.py") == [
            *extra,
            f"from servecheck.{package}.{name} import *",
        ], f"{top}/{name}.py must only import servecheck/{package}/{name}.py"


def test_checkout_load_plans_are_the_packaged_files() -> None:
    shipped = sorted(p.name for p in (PKG / "loadtests").iterdir())
    assert sorted(p.name for p in (ROOT / "loadtests").iterdir()) == shipped
    for name in shipped:
        link = ROOT / "loadtests" / name
        assert link.is_symlink() and link.resolve() == (PKG / "loadtests" / name).resolve(), name


def test_builtin_reference_target_matches_the_repositorys() -> None:
    def reference(path: Path) -> dict[str, object]:
        data = yaml.safe_load(path.read_text())
        return next(t for t in data["targets"] if t["name"] == "reference")

    assert reference(PKG / "config" / "builtin_targets.yaml") == reference(ROOT / "targets.yaml")


def _targets_file(folder: Path, server: RunningServer) -> Path:
    path = folder / "t.yaml"
    path.write_text(
        "targets:\n"
        "  - name: mine\n"
        f"    base_url: {server.base_url}\n"
        "    engine: reference\n"
        "    models: [ref-tiny]\n"
        "    context_length: 512\n"
    )
    return path


def _run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None, timeout: float = 300):
    out = subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    return out.returncode, out.stdout + out.stderr


def test_documented_examples_run_against_a_target(
    tmp_path: Path, make_reference: Callable[..., RunningServer]
) -> None:
    """docs/pytest-plugin.md's example conftest.py and tests, as a user's repository runs them
    (this environment's plugin entry point; the slow test does the same with the wheel)."""
    shutil.copytree(EXAMPLES, tmp_path / "mine")
    targets = _targets_file(tmp_path, make_reference())
    code, out = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "mine"]
        + ["--target", "mine", "--targets-file", str(targets)],
        cwd=tmp_path,
    )
    assert code == 0 and "3 passed" in out, out


def test_packaged_suite_runs_by_pyargs_from_another_folder(
    tmp_path: Path, make_reference: Callable[..., RunningServer]
) -> None:
    targets = _targets_file(tmp_path, make_reference())
    code, out = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["--pyargs", "servecheck.suites.test_models", "--target", "mine"]
        + ["--targets-file", str(targets)],
        cwd=tmp_path,
    )
    assert code == 0 and " passed" in out and "failed" not in out, out


def test_servecheck_pytest_passes_everything_through(
    tmp_path: Path, make_reference: Callable[..., RunningServer]
) -> None:
    """``servecheck pytest ...`` (the way in after ``pipx install``, which exposes no pytest):
    the suites by --pyargs with every option pytest's, and pytest's exit code as ours."""
    targets = _targets_file(tmp_path, make_reference())
    servecheck = [sys.executable, "-m", "servecheck"]
    code, out = _run(
        [*servecheck, "pytest", "-q", "-p", "no:cacheprovider", "--pyargs"]
        + [
            "servecheck.suites.test_models",
            "--sc-target",
            "mine",
            "--sc-targets-file",
            str(targets),
        ],
        cwd=tmp_path,
    )
    assert code == 0 and " passed" in out and "failed" not in out, out
    (tmp_path / "test_red.py").write_text("def test_red():\n    assert 1 == 2\n")
    code, out = _run(
        [*servecheck, "pytest", "-q", "-p", "no:cacheprovider", "test_red.py"], tmp_path
    )
    assert code == 1 and "1 failed" in out, out
    code, out = _run([*servecheck, "pytest", "--", "--version"], tmp_path)
    assert code == 0 and out.startswith("pytest "), out


def test_engine_model_without_tokenizers_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A wheel or pipx install without ``[engines]`` has no tokenizers: ``engine model`` (and
    ``engine up``, which makes the same model) says which extra to install, in one line."""
    from servecheck.cli import main

    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import tokenizers -> ModuleNotFoundError
    code = main(["engine", "model", "--out", str(tmp_path / "models")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert "tokenizers" in err and "pip install 'servecheck[engines]'" in err, err
    assert not (tmp_path / "models").exists()  # nothing half-made


def test_plugin_is_inert_in_another_projects_suites_folder(tmp_path: Path) -> None:
    """The entry point loads the plugin into every pytest run: a project with its own
    ``suites/`` and no targets file must not notice it."""
    (tmp_path / "suites").mkdir()
    (tmp_path / "suites" / "test_theirs.py").write_text("def test_theirs():\n    assert True\n")
    code, out = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "suites"], cwd=tmp_path
    )
    assert code == 0 and "1 passed" in out, out


# ---------------------------------------------------------------------------------------------
# The wheel in a new environment outside the repository


def _deps_dir(tmp: Path) -> Path:
    """This environment's installed packages except servecheck itself, as symlinks: the new
    environment sees the dependencies (no download, seconds instead of minutes) but only the
    wheel's servecheck."""
    site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp / "deps"
    deps.mkdir()
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("servecheck", "__editable__", "_servecheck")) or name.endswith(".pth"):
            continue
        (deps / entry.name).symlink_to(entry)
    return deps


REQUIREMENTS_MET = """
from importlib.metadata import requires, version
from packaging.requirements import Requirement
bad = []
for text in requires("servecheck"):
    req = Requirement(text)
    if req.marker is None or req.marker.evaluate({"extra": ""}):
        if not req.specifier.contains(version(req.name), prereleases=True):
            bad.append(f"{req}: {version(req.name)}")
print("ok" if not bad else "unmet: " + ", ".join(bad))
"""


def _build_wheel(out: Path, native: bool = False) -> Path:
    """The wheel of this checkout's files (tracked and new, not ignored ones), built into ``out``;
    ``native`` asks setup.py for the C reader as ``make venv`` does."""
    src = out / "src"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.split()
    for rel in files:
        path = ROOT / rel
        if path.is_file() and not path.is_symlink():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / rel)
    env = {k: v for k, v in os.environ.items() if k != "SERVECHECK_BUILD_NATIVE"}
    if native:
        env["SERVECHECK_BUILD_NATIVE"] = "1"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    # No build isolation: the build needs only setuptools, which this environment has.
    wheel_dir = out / "dist"
    code, text = _run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheel_dir), str(src)],
        out,
        env,
    )
    assert code == 0, text
    (wheel,) = wheel_dir.glob("servecheck-*.whl")
    return wheel


@pytest.fixture(scope="module")
def built_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.mark.slow
def test_default_wheel_is_pure_python(built_wheel: Path) -> None:
    """The optional native reader made the wheel cp311-linux only; by default it is left out."""
    assert built_wheel.name.endswith("-py3-none-any.whl"), built_wheel.name
    with zipfile.ZipFile(built_wheel) as whl:
        assert not [n for n in whl.namelist() if n.endswith(".so")], whl.namelist()


@pytest.mark.slow
def test_native_build_as_make_venv_asks_has_the_reader(tmp_path: Path) -> None:
    if not shutil.which("cc") and not shutil.which("gcc"):
        pytest.skip("no C compiler: the native reader cannot be built here")
    wheel = _build_wheel(tmp_path, native=True)
    assert "-cp3" in wheel.name and "linux" in wheel.name, wheel.name
    with zipfile.ZipFile(wheel) as whl:
        for module in ("_rxthread", "_lane"):  # the reader thread and the lane
            assert [
                n
                for n in whl.namelist()
                if n.startswith(f"servecheck/load/generator/{module}.") and n.endswith(".so")
            ], whl.namelist()
    makefile = (ROOT / "Makefile").read_text()
    assert "SERVECHECK_BUILD_NATIVE=1 $(BIN)/python -m pip install" in makefile


@pytest.fixture(scope="module")
def installed(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new venv (outside the repository) with the wheel built from this checkout."""
    tmp = tmp_path_factory.mktemp("install")
    wheel = built_wheel
    venv = tmp / "venv"
    code, out = _run([sys.executable, "-m", "venv", str(venv)], tmp)
    assert code == 0, out
    vpy = venv / "bin" / "python"
    vsite = Path(
        subprocess.run(
            [str(vpy), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.strip()
    )
    (vsite / "servecheck_test_deps.pth").write_text(f"{_deps_dir(tmp)}\n")
    code, out = _run([str(vpy), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], tmp)
    assert code == 0, out
    # The wheel's declared dependencies (its metadata) are all there, in versions it accepts.
    code, out = _run([str(vpy), "-c", REQUIREMENTS_MET], tmp)
    assert code == 0 and out.startswith("ok"), out
    yield venv


@pytest.fixture(scope="module")
def installed_server(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The installed environment's own reference server; yields its base URL."""
    tmp = tmp_path_factory.mktemp("server")
    ready = tmp / "port"
    proc = subprocess.Popen(
        [str(installed / "bin" / "servecheck"), "reference-server", "--port", "0"]
        + ["--itl-ms", "2", "--ready-file", str(ready)],
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)  # polling for the ready file, bounded by the deadline
        assert ready.exists(), f"the installed reference server did not start (rc {proc.poll()})"
        yield f"http://127.0.0.1:{int(ready.read_text())}/v1"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _empty_folder(tmp_path: Path, base_url: str | None = None) -> tuple[Path, dict[str, str]]:
    work = tmp_path / "empty"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SERVECHECK_", "PYTHON"))}
    if base_url:
        (work / "t.yaml").write_text(
            f"targets:\n  - name: mine\n    base_url: {base_url}\n    engine: reference\n"
            "    models: [ref-tiny]\n    context_length: 512\n"
        )
    return work, env


@pytest.mark.slow
def test_installed_servecheck_check_from_an_empty_folder(installed: Path, tmp_path: Path) -> None:
    work, env = _empty_folder(tmp_path)
    code, out = _run(
        [str(installed / "bin" / "python"), "-c", "import servecheck; print(servecheck.__file__)"],
        work,
        env,
    )
    assert code == 0 and out.strip().startswith(str(installed)), out
    code, out = _run(
        [str(installed / "bin" / "servecheck"), "check", "-n", "2", "--run-id", "run"], work, env
    )
    assert code == 0, out
    summary = json.loads((work / "reports" / "run" / "summary.json").read_text())
    assert summary["counts"].get("passed", 0) >= 40 and not summary["counts"].get("failed"), out


@pytest.mark.slow
def test_installed_pytest_plugin_from_an_empty_folder(
    installed: Path, installed_server: str, tmp_path: Path
) -> None:
    work, env = _empty_folder(tmp_path, installed_server)
    py = str(installed / "bin" / "python")
    code, out = _run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--pyargs"]
        + ["servecheck.suites", "--target", "mine", "--targets-file", "t.yaml"],
        work,
        env,
    )
    assert code == 0 and " passed" in out and "failed" not in out, out
    shutil.copytree(EXAMPLES, work / "mine")
    code, out = _run(
        [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "mine"]
        + ["--target", "mine", "--targets-file", "t.yaml"],
        work,
        env,
    )
    assert code == 0 and "3 passed" in out, out


# ---------------------------------------------------------------------------------------------
# README's install paths (pip, pipx, uv), each from an empty folder with real dependency
# resolution. The dependencies are fetched once into a wheelhouse (pip's cache makes that
# quick); the three installs then read only that folder (--no-index), so they need no network.


@pytest.fixture(scope="module")
def wheelhouse(built_wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    house = tmp_path_factory.mktemp("wheelhouse")
    code, out = _run(
        [sys.executable, "-m", "pip", "-q", "wheel", "-w", str(house), str(built_wheel)],
        house,
        timeout=900,
    )
    if code != 0 and ("No matching distribution" in out or "Could not fetch" in out):
        pytest.skip(f"the package index cannot be reached: {out.strip().splitlines()[-1]}")
    assert code == 0, out
    return house


def _tool(name: str) -> str:
    found = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (it is in the [dev] extra)")
    return found


def _install_with(installer: str, wheel: Path, house: Path, tmp: Path) -> Path:
    """Install ``wheel`` the README's way for ``installer``; returns the folder of the exposed
    ``servecheck`` command."""
    offline = ["--no-index", "--find-links", str(house)]
    if installer == "pip":
        venv = tmp / "venv"
        code, out = _run([sys.executable, "-m", "venv", str(venv)], tmp)
        assert code == 0, out
        cmd = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", *offline, str(wheel)]
        bindir, env = venv / "bin", None
    elif installer == "pipx":
        bindir = tmp / "pipx-bin"
        env = {**os.environ, "PIPX_HOME": str(tmp / "pipx"), "PIPX_BIN_DIR": str(bindir)}
        env["PIPX_MAN_DIR"] = str(tmp / "pipx-man")
        cmd = [_tool("pipx"), "install", "--python", sys.executable]
        cmd += ["--pip-args", " ".join(offline), str(wheel)]
    else:
        bindir = tmp / "uv-bin"
        env = {**os.environ, "UV_TOOL_DIR": str(tmp / "uv-tools"), "UV_TOOL_BIN_DIR": str(bindir)}
        env["UV_CACHE_DIR"] = str(tmp / "uv-cache")
        cmd = [_tool("uv"), "tool", "install", "--python", sys.executable, *offline, str(wheel)]
    code, out = _run(cmd, tmp, env, timeout=900)
    assert code == 0, f"{installer}: {out}"
    return bindir


@pytest.mark.slow
def test_readme_install_paths_from_an_empty_folder(
    built_wheel: Path, wheelhouse: Path, tmp_path: Path
) -> None:
    """pip into a new venv, ``pipx install`` and ``uv tool install``: each exposes a working
    ``servecheck``, and its pytest through ``servecheck pytest`` (pipx and uv expose no pytest)."""
    for installer in ("pip", "pipx", "uv"):
        tmp = tmp_path / installer
        tmp.mkdir()
        bindir = _install_with(installer, built_wheel, wheelhouse, tmp)
        work, env = _empty_folder(tmp)
        env["PATH"] = f"{bindir}{os.pathsep}/usr/bin{os.pathsep}/bin"
        servecheck = str(bindir / "servecheck")
        code, out = _run([servecheck, "--help"], work, env)
        assert code == 0 and "usage: servecheck" in out, f"{installer}: {out}"
        code, out = _run([servecheck, "checks"], work, env)
        assert code == 0 and "STREAM-DONE" in out, f"{installer}: {out}"
        code, out = _run(
            [servecheck, "pytest", "-p", "no:cacheprovider", "--pyargs", "servecheck.suites"]
            + ["--co", "-q"],
            work,
            env,
        )
        assert code == 0 and "reference/ref-tiny/STREAM-DONE" in out, f"{installer}: {out}"
        if installer != "pip":
            assert not (bindir / "pytest").exists(), f"{installer} exposed pytest after all"
        assert sorted(p.name for p in work.iterdir()) == [], f"{installer} wrote into {work}"
