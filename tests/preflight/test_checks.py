"""Every preflight check: it passes on a good model and finds its defect, with its id."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from servecheck.errors import UsageError
from servecheck.preflight import CATALOGUE, PreflightOptions, Severity, run_preflight
from servecheck.preflight.findings import Finding

from .builders import to_hf_cache, write_gguf, write_model
from .cases import GGUF_CASES, HF_CASES, PLAIN_CASES, Case


@pytest.fixture
def open_tmp() -> Iterator[Path]:
    """A temporary folder every user can search (tmp_path's parents are 0700)."""
    path = Path(tempfile.mkdtemp(prefix="servecheck-preflight-"))
    os.chmod(path, 0o755)
    try:
        yield path
    finally:
        os.chmod(path, 0o755)
        for sub in path.rglob("*"):
            if sub.is_dir() and not sub.is_symlink():
                os.chmod(sub, 0o755)
        shutil.rmtree(path)


def _describe(findings: list[Finding]) -> str:
    return (
        "\n".join(f"  {f.severity.value} {f.id} {f.path}: {f.message}" for f in findings)
        or "  (none)"
    )


def _expect(case: Case, findings: list[Finding]) -> None:
    hits = [f for f in findings if f.id == case.expected_id]
    if not hits:
        pytest.fail(f"expected {case.expected_id}; got:\n{_describe(findings)}")
    if not any(f.severity.value == case.severity for f in hits):
        pytest.fail(f"expected {case.expected_id} as {case.severity}; got:\n{_describe(hits)}")
    if case.message_part and not any(case.message_part in f.message for f in hits):
        pytest.fail(f"expected {case.message_part!r} in the message; got:\n{_describe(hits)}")
    if not all(f.fix for f in hits):
        pytest.fail(f"every finding must say how to fix it:\n{_describe(hits)}")


def _problems(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity is not Severity.INFO]


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in PLAIN_CASES])
def test_plain_folder_defect(name: str, tmp_path: Path, open_tmp: Path) -> None:
    case = PLAIN_CASES[name]
    folder = write_model((open_tmp if case.open_parents else tmp_path) / "model")
    target = case.breaker(folder) or folder
    _expect(case, run_preflight(target, PreflightOptions(**case.options)).findings)


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in HF_CASES])
def test_hf_cache_defect(name: str, tmp_path: Path) -> None:
    case = HF_CASES[name]
    repo = to_hf_cache(write_model(tmp_path / "plain"), tmp_path / "hub")
    target = case.breaker(repo) or repo
    _expect(case, run_preflight(target, PreflightOptions(**case.options)).findings)


@pytest.mark.parametrize("name", [pytest.param(n, id=n) for n in GGUF_CASES])
def test_gguf_defect(name: str, tmp_path: Path) -> None:
    case = GGUF_CASES[name]
    folder = tmp_path / "gguf"
    folder.mkdir()
    case.breaker(folder)
    _expect(case, run_preflight(folder, PreflightOptions(**case.options)).findings)


def test_every_catalogued_id_has_a_defect_case() -> None:
    covered = {
        c.expected_id for cases in (PLAIN_CASES, HF_CASES, GGUF_CASES) for c in cases.values()
    }
    covered |= {"PF-MANIFEST-MISSING-FILE", "PF-SHA256-UNVERIFIED", "PF-DISK-SPACE"}  # tests below
    missing = sorted(set(CATALOGUE) - covered)
    if missing:
        pytest.fail(f"catalogue ids without a self-test: {missing}")


@pytest.mark.parametrize(
    "layout",
    [
        pytest.param("plain", id="plain"),
        pytest.param("plain-single-shard", id="plain-single-shard"),
        pytest.param("hf-repo", id="hf-repo"),
        pytest.param("hf-snapshot", id="hf-snapshot"),
        pytest.param("gguf-folder", id="gguf-folder"),
        pytest.param("gguf-file", id="gguf-file"),
        pytest.param("safetensors-file", id="safetensors-file"),
    ],
)
def test_good_model_has_no_problem(layout: str, open_tmp: Path) -> None:
    # The strictest declaration a launch could make, checked as a user that owns nothing.
    options = PreflightOptions(
        quantization="none", context_length=2048, chat=True, verify_sha256=True, uid=54321, gids=()
    )
    if layout.startswith("gguf"):
        path = write_gguf(_mkdir(open_tmp / "g") / "tiny.gguf")
        target = path if layout == "gguf-file" else path.parent
    elif layout.startswith("hf"):
        repo = to_hf_cache(write_model(open_tmp / "plain"), open_tmp / "hub")
        target = repo if layout == "hf-repo" else next((repo / "snapshots").iterdir())
    else:
        folder = write_model(open_tmp / "plain", shards=1 if layout.endswith("single-shard") else 2)
        target = next(folder.glob("*.safetensors")) if layout == "safetensors-file" else folder
    if not layout.startswith("hf"):
        options.verify_sha256 = False  # plain folders have no hashes to verify against
    report = run_preflight(target, options)
    if _problems(report.findings):
        pytest.fail(f"good {layout} model has findings:\n{_describe(_problems(report.findings))}")
    if report.weight_bytes <= 0 or not report.ok:
        pytest.fail(f"expected ok and a weight estimate, got {report.to_dict()}")
    if layout == "hf-repo" and report.hashed_bytes == 0:
        pytest.fail("--verify-sha256 hashed nothing in an HF cache")


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _manifest(folder: Path, tamper: str | None = None, extra: str | None = None) -> Path:
    import hashlib

    lines = []
    for f in sorted(folder.glob("*.safetensors")):
        digest = hashlib.sha256(f.read_bytes()).hexdigest()
        if f.name == tamper:
            digest = "0" * 64
        lines.append(f"{digest}  {f.name}")
    if extra:
        lines.append(f"{'1' * 64} *{extra}")
    path = folder.parent / "SHA256SUMS"
    path.write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(
    ("tamper", "extra", "expected"),
    [
        pytest.param(None, None, None, id="manifest-good"),
        pytest.param(
            "model-00002-of-00002.safetensors", None, "PF-SHA256-MISMATCH", id="manifest-mismatch"
        ),
        pytest.param(
            None,
            "model-00003-of-00002.safetensors",
            "PF-MANIFEST-MISSING-FILE",
            id="manifest-missing-file",
        ),
    ],
)
def test_manifest(
    tmp_path: Path, tamper: str | None, extra: str | None, expected: str | None
) -> None:
    folder = write_model(tmp_path / "model")
    report = run_preflight(folder, PreflightOptions(manifest=_manifest(folder, tamper, extra)))
    ids = [f.id for f in _problems(report.findings)]
    if ids != ([expected] if expected else []):
        pytest.fail(f"expected {expected}, got:\n{_describe(report.findings)}")
    if report.hashed_bytes == 0:
        pytest.fail("the manifest's files were not hashed")


def test_malformed_manifest_is_a_usage_error(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "model")
    manifest = tmp_path / "SHA256SUMS"
    manifest.write_text("not-a-digest  model.safetensors\n")
    with pytest.raises(UsageError, match=r"SHA256SUMS:1: expected `<64 hex sha256>  <path>`"):
        run_preflight(folder, PreflightOptions(manifest=manifest))


def test_verify_without_known_hashes_says_so(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "model")
    findings = run_preflight(folder, PreflightOptions(verify_sha256=True)).findings
    if [f.id for f in findings if f.id == "PF-SHA256-UNVERIFIED"] != ["PF-SHA256-UNVERIFIED"]:
        pytest.fail(f"expected PF-SHA256-UNVERIFIED:\n{_describe(findings)}")


def test_low_disk_space_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = write_model(tmp_path / "model")
    monkeypatch.setattr(shutil, "disk_usage", lambda _p: shutil._ntuple_diskusage(10, 10, 1))
    findings = run_preflight(folder).findings
    if not any(f.id == "PF-DISK-SPACE" and f.severity is Severity.WARNING for f in findings):
        pytest.fail(f"expected PF-DISK-SPACE:\n{_describe(findings)}")


@pytest.mark.parametrize(
    ("make", "pattern"),
    [
        pytest.param(lambda p: p / "missing", r"no such file or directory", id="nonexistent"),
        pytest.param(
            lambda p: _hub_root(p),
            r"looks like an HF cache root; pass one repo folder",
            id="cache-root",
        ),
        pytest.param(
            lambda p: _text_file(p),
            r"expected a model folder, a .safetensors or a .gguf file",
            id="other-file",
        ),
    ],
)
def test_bad_path_is_a_usage_error(tmp_path: Path, make: object, pattern: str) -> None:
    with pytest.raises(UsageError, match=pattern):
        run_preflight(make(tmp_path))  # type: ignore[operator]


def test_unknown_revision_suggests_one(tmp_path: Path) -> None:
    repo = to_hf_cache(write_model(tmp_path / "plain"), tmp_path / "hub")
    with pytest.raises(
        UsageError, match=r'revision \'mian\' has no snapshot \(did you mean "main"\?\)'
    ):
        run_preflight(repo, PreflightOptions(revision="mian"))


def _hub_root(tmp: Path) -> Path:
    to_hf_cache(write_model(tmp / "plain"), tmp / "hub")
    return tmp / "hub"


def _text_file(tmp: Path) -> Path:
    path = tmp / "notes.txt"
    path.write_text("hi")
    return path


def test_quantization_aliases_and_online_methods_pass(tmp_path: Path) -> None:
    folder = write_model(tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "awq"}
    (folder / "config.json").write_text(json.dumps(config))
    for declared in ("awq", "AWQ", "awq_marlin", "awq-marlin"):
        findings = run_preflight(folder, PreflightOptions(quantization=declared)).findings
        if any(f.id == "PF-CONFIG-QUANT-MISMATCH" for f in findings):
            pytest.fail(f"{declared} should match awq:\n{_describe(findings)}")
    plain = write_model(tmp_path / "plain")
    findings = run_preflight(plain, PreflightOptions(quantization="fp8")).findings
    if any(f.id == "PF-CONFIG-QUANT-MISMATCH" for f in findings):
        pytest.fail(f"fp8 is applied at load time to unquantized weights:\n{_describe(findings)}")


def test_mistral_consolidated_file_is_not_a_stray_shard(tmp_path: Path) -> None:
    from safetensors.numpy import save_file

    from .builders import shard_tensors

    folder = write_model(tmp_path / "model")
    save_file(shard_tensors(1), str(folder / "consolidated.safetensors"))
    findings = _problems(run_preflight(folder).findings)
    if findings:
        pytest.fail(f"consolidated.safetensors next to HF shards is legal:\n{_describe(findings)}")


def test_revision_needs_an_hf_cache(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"^revision main: .* is not an HF cache repo"):
        run_preflight(write_model(tmp_path / "model"), PreflightOptions(revision="main"))


class _RecordingProgress:
    def __init__(self) -> None:
        self.total = -1
        self.advanced = 0
        self.files: list[str] = []
        self.finished = False

    def start(self, total_bytes: int) -> None:
        self.total = total_bytes

    def file(self, name: str) -> None:
        self.files.append(name)

    def advance(self, n_bytes: int) -> None:
        self.advanced += n_bytes

    def finish(self) -> None:
        self.finished = True


def test_hash_progress_is_reported(tmp_path: Path) -> None:
    repo = to_hf_cache(write_model(tmp_path / "plain"), tmp_path / "hub")
    progress = _RecordingProgress()
    report = run_preflight(repo, PreflightOptions(verify_sha256=True), progress)
    got = (progress.total, progress.advanced, progress.finished)
    if got != (report.hashed_bytes, report.hashed_bytes, True) or not progress.files:
        pytest.fail(
            f"Received (total, advanced, finished) {got}, files {progress.files}; hashed {report.hashed_bytes}"
        )


def test_gguf_tensor_data_is_never_read(tmp_path: Path) -> None:
    """A 4 GiB sparse GGUF: truncation is computed from the tensor table, data stays unread."""
    import time

    import gguf
    import numpy as np

    path = tmp_path / "big.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_chat_template("{{ messages }}")
    n = 1024**3  # float32 elements: 4 GiB
    writer.add_tensor_info("big.weight", (n,), np.dtype(np.float32), n * 4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    first = run_preflight(path).findings
    truncated = [f for f in first if f.id == "PF-GGUF-TRUNCATED"]
    if not truncated:
        pytest.fail(f"header-only file must be reported truncated:\n{_describe(first)}")
    with path.open("r+b") as fh:  # make it whole, sparsely
        fh.truncate(int(truncated[0].message.split("ends at byte ")[1].split()[0]))
    started = time.process_time()
    report = run_preflight(path)
    cpu = time.process_time() - started
    if _problems(report.findings) or report.weight_bytes != n * 4:
        pytest.fail(f"sparse whole GGUF should pass:\n{_describe(report.findings)}")
    if cpu > 0.5:
        pytest.fail(f"{cpu:.2f} s CPU for a 4 GiB GGUF: tensor data was read")


@pytest.mark.parametrize(
    ("method", "expected"),
    [
        pytest.param("open", "PF-ACCESS-FILE", id="read-fails-despite-mode-bits"),
        pytest.param("iterdir", "PF-ACCESS-DIR", id="listing-fails"),
    ],
)
def test_os_errors_become_findings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, method: str, expected: str
) -> None:
    """What mode bits cannot predict (ACLs, SELinux, a dead mount) is a finding, not a traceback."""
    folder = write_model(tmp_path / "model")
    original = getattr(Path, method)

    def denied(self: Path, *args: object, **kwargs: object) -> object:
        if self.suffix == ".safetensors" or (method == "iterdir" and self == folder):
            raise PermissionError(13, "Permission denied")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Path, method, denied)
    findings = run_preflight(folder).findings
    if not any(f.id == expected and "Permission denied" in f.message for f in findings):
        pytest.fail(f"expected {expected}:\n{_describe(findings)}")


@pytest.mark.parametrize(
    ("eos_id", "expected"),
    [
        pytest.param(2, [], id="consistent"),
        pytest.param(4, ["PF-TOK-SPECIAL-MISMATCH"], id="eos-mismatch"),
    ],
)
def test_tokenizer_checks_without_the_tokenizers_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, eos_id: int, expected: list[str]
) -> None:
    """Without ``tokenizers`` installed, tokenizer.json is read as plain JSON, same verdicts."""
    import importlib.util

    from .builders import model_config

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tokenizers" else real_find_spec(name, *a),
    )
    folder = write_model(tmp_path / "model", config=model_config(eos_token_id=eos_id))
    ids = [f.id for f in _problems(run_preflight(folder).findings)]
    if ids != expected:
        pytest.fail(f"Received: {ids}\nExpected: {expected}")
