"""Findings and the catalogue of preflight check ids.

Every finding carries a stable id from :data:`CATALOGUE`. The id is what a user greps for in a
report, excludes in a pipeline, and looks up in ``docs/preflight.md`` (generated from this
table by :func:`servecheck.preflight.docs.render_catalogue`), so ids are never renamed.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Severity(StrEnum):
    """How bad a finding is. Only ``error`` makes the preflight fail (exit code 1)."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(slots=True, frozen=True)
class CheckInfo:
    """One catalogue entry: an id, its usual severity, what it means and the area it covers."""

    id: str
    severity: Severity
    area: str
    description: str


@dataclass(slots=True)
class Finding:
    """One thing preflight found: what is wrong, in which file, and how to fix it."""

    id: str
    severity: Severity
    path: str
    message: str
    fix: str

    def to_dict(self) -> dict[str, str]:
        """The JSON form used by ``servecheck preflight --json`` (keys documented in docs)."""
        return {
            "id": self.id,
            "severity": self.severity.value,
            "path": self.path,
            "message": self.message,
            "fix": self.fix,
        }


E, W, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

_ENTRIES: tuple[CheckInfo, ...] = (
    # layout
    CheckInfo("PF-NO-WEIGHTS", E, "layout", "No *.safetensors or *.gguf weight file was found."),
    CheckInfo(
        "PF-WEIGHTS-NOT-CHECKED",
        W,
        "layout",
        "Pickle weights (*.bin, *.pt, *.pth) are present; their contents are not checked.",
    ),
    CheckInfo(
        "PF-MIXED-REVISION",
        E,
        "layout",
        "Shard names or the index's total_size disagree with the shards on disk: files from two revisions are mixed.",
    ),
    # safetensors
    CheckInfo("PF-ST-ZERO-BYTE", E, "safetensors", "A .safetensors file is empty (0 bytes)."),
    CheckInfo(
        "PF-ST-TOO-SMALL",
        E,
        "safetensors",
        "A .safetensors file is shorter than the 8-byte header length.",
    ),
    CheckInfo(
        "PF-ST-HEADER-LENGTH",
        E,
        "safetensors",
        "The header length (first 8 bytes, little-endian u64) is larger than the file or than 100 MB.",
    ),
    CheckInfo("PF-ST-HEADER-JSON", E, "safetensors", "The header is not a UTF-8 JSON object."),
    CheckInfo(
        "PF-ST-BAD-ENTRY",
        E,
        "safetensors",
        "A header entry lacks dtype/shape/data_offsets, or __metadata__ is not a string map.",
    ),
    CheckInfo(
        "PF-ST-UNKNOWN-DTYPE", E, "safetensors", "A tensor has a dtype safetensors does not define."
    ),
    CheckInfo(
        "PF-ST-SIZE-MISMATCH",
        E,
        "safetensors",
        "A tensor's data_offsets span differs from dtype size x shape.",
    ),
    CheckInfo(
        "PF-ST-OFFSETS",
        E,
        "safetensors",
        "Tensors are not packed back to back from offset 0 (gap, overlap or reversed offsets).",
    ),
    CheckInfo(
        "PF-ST-TRUNCATED",
        E,
        "safetensors",
        "The file is shorter than 8 + header length + end of the last tensor.",
    ),
    CheckInfo(
        "PF-ST-TRAILING-BYTES",
        E,
        "safetensors",
        "The file is longer than 8 + header length + end of the last tensor.",
    ),
    CheckInfo("PF-ST-NO-TENSORS", W, "safetensors", "A .safetensors file holds no tensors."),
    CheckInfo(
        "PF-ST-DUPLICATE-TENSOR", E, "safetensors", "The same tensor name is stored in two shards."
    ),
    # index
    CheckInfo(
        "PF-INDEX-JSON",
        E,
        "index",
        "model.safetensors.index.json does not parse or has no weight_map object.",
    ),
    CheckInfo(
        "PF-INDEX-MISSING-SHARD", E, "index", "The index names a shard file that does not exist."
    ),
    CheckInfo(
        "PF-INDEX-MISSING-TENSOR",
        E,
        "index",
        "The index maps a tensor to a shard whose header does not contain it.",
    ),
    CheckInfo(
        "PF-INDEX-UNINDEXED-TENSOR",
        W,
        "index",
        "A shard holds a tensor that the index's weight_map does not list.",
    ),
    CheckInfo(
        "PF-INDEX-STRAY-SHARD",
        W,
        "index",
        "A .safetensors file in the folder is not named by the index.",
    ),
    # HF cache
    CheckInfo(
        "PF-HF-NO-SNAPSHOT", E, "hf-cache", "The HF cache repo folder has no snapshot to check."
    ),
    CheckInfo(
        "PF-HF-REF-DANGLING",
        E,
        "hf-cache",
        "A refs/<branch> file names a revision that has no snapshots/<rev> folder.",
    ),
    CheckInfo(
        "PF-HF-NO-REF",
        W,
        "hf-cache",
        "No refs/main: the newest snapshot was checked, but engines resolve the repo id through refs/main.",
    ),
    CheckInfo(
        "PF-HF-STALE-SNAPSHOT",
        W,
        "hf-cache",
        "The snapshot checked is not the one refs/main points to.",
    ),
    CheckInfo(
        "PF-HF-OTHER-SNAPSHOTS",
        INFO,
        "hf-cache",
        "The repo holds other snapshots than the one checked.",
    ),
    CheckInfo(
        "PF-HF-DANGLING-SYMLINK", E, "hf-cache", "A snapshot symlink does not resolve to a file."
    ),
    CheckInfo("PF-HF-EMPTY-BLOB", E, "hf-cache", "A snapshot file resolves to an empty blob."),
    CheckInfo(
        "PF-HF-INCOMPLETE",
        E,
        "hf-cache",
        "blobs/ holds *.incomplete files: a download was interrupted or is still running.",
    ),
    CheckInfo(
        "PF-HF-FOREIGN-LINK",
        W,
        "hf-cache",
        "A snapshot symlink points outside the repo's blobs/ folder.",
    ),
    # integrity
    CheckInfo(
        "PF-SHA256-MISMATCH",
        E,
        "integrity",
        "A file's sha256 differs from its HF blob name or its manifest line.",
    ),
    CheckInfo(
        "PF-MANIFEST-MISSING-FILE",
        E,
        "integrity",
        "A file listed in the manifest does not exist.",
    ),
    CheckInfo(
        "PF-SHA256-UNVERIFIED",
        INFO,
        "integrity",
        "sha256 verification was asked but a weight file has no known hash (no blob name, no manifest line).",
    ),
    # config.json
    CheckInfo(
        "PF-CONFIG-MISSING", E, "config", "config.json is missing next to safetensors weights."
    ),
    CheckInfo("PF-CONFIG-JSON", E, "config", "config.json does not parse as a JSON object."),
    CheckInfo("PF-CONFIG-NO-MODEL-TYPE", E, "config", "config.json has no model_type."),
    CheckInfo(
        "PF-CONFIG-NO-ARCHITECTURES",
        E,
        "config",
        "config.json has no non-empty architectures list.",
    ),
    CheckInfo("PF-CONFIG-NO-DTYPE", W, "config", "config.json has neither torch_dtype nor dtype."),
    CheckInfo(
        "PF-CONFIG-REMOTE-CODE",
        W,
        "config",
        "config.json has auto_map: the model needs trust_remote_code.",
    ),
    CheckInfo(
        "PF-CONFIG-REMOTE-CODE-MISSING",
        E,
        "config",
        "A local remote-code file named in auto_map is missing.",
    ),
    CheckInfo(
        "PF-CONFIG-QUANT-MISMATCH",
        E,
        "config",
        "quantization_config in config.json disagrees with the declared quantization.",
    ),
    CheckInfo(
        "PF-CONFIG-CONTEXT-TOO-LONG",
        E,
        "config",
        "The declared context length exceeds the model's maximum positions.",
    ),
    CheckInfo(
        "PF-CONFIG-NO-CONTEXT",
        W,
        "config",
        "A context length was declared but the config has no maximum-length key.",
    ),
    # tokenizer
    CheckInfo(
        "PF-TOK-MISSING",
        E,
        "tokenizer",
        "No tokenizer.json, tokenizer.model, vocab.json+merges.txt or *.tiktoken file.",
    ),
    CheckInfo(
        "PF-TOK-UNREADABLE",
        E,
        "tokenizer",
        "tokenizer.json or tokenizer_config.json does not load.",
    ),
    CheckInfo(
        "PF-TOK-SPECIAL-MISMATCH",
        W,
        "tokenizer",
        "bos/eos ids in config.json disagree with the tokenizer's special tokens.",
    ),
    CheckInfo(
        "PF-TOK-SPECIAL-UNKNOWN",
        W,
        "tokenizer",
        "tokenizer_config.json names a bos/eos token the tokenizer does not know.",
    ),
    CheckInfo(
        "PF-TOK-VOCAB-SIZE",
        W,
        "tokenizer",
        "The tokenizer has more tokens than config.json vocab_size (ids past the embedding).",
    ),
    CheckInfo(
        "PF-TOK-NO-CHAT-TEMPLATE",
        E,
        "tokenizer",
        "No chat template (an error for a chat model, the default; a warning otherwise).",
    ),
    # GGUF
    CheckInfo("PF-GGUF-ZERO-BYTE", E, "gguf", "A .gguf file is empty (0 bytes)."),
    CheckInfo("PF-GGUF-BAD-MAGIC", E, "gguf", "A .gguf file does not start with the GGUF magic."),
    CheckInfo(
        "PF-GGUF-BAD-VERSION",
        E,
        "gguf",
        "A .gguf file has a format version the gguf reader does not support.",
    ),
    CheckInfo(
        "PF-GGUF-UNREADABLE",
        E,
        "gguf",
        "The GGUF metadata or tensor table cannot be parsed (truncated or corrupt header).",
    ),
    CheckInfo(
        "PF-GGUF-TRUNCATED", E, "gguf", "A tensor's data ends past the end of the .gguf file."
    ),
    CheckInfo(
        "PF-GGUF-MISSING-SPLIT",
        E,
        "gguf",
        "A split GGUF (name-0000k-of-0000n.gguf) lacks one of its parts.",
    ),
    # host
    CheckInfo(
        "PF-ACCESS-DIR",
        E,
        "host",
        "A directory on the way to or inside the model lacks r/x for the serving user.",
    ),
    CheckInfo("PF-ACCESS-FILE", E, "host", "A model file is not readable by the serving user."),
    CheckInfo(
        "PF-DISK-SPACE", W, "host", "Free space on the model's volume is below the model's size."
    ),
    CheckInfo("PF-WEIGHT-MEMORY", INFO, "host", "Estimated weight memory (sum of tensor bytes)."),
    CheckInfo(
        "PF-GPU-MEMORY",
        E,
        "host",
        "Estimated weight memory exceeds the declared GPU memory budget.",
    ),
)

CATALOGUE: dict[str, CheckInfo] = {entry.id: entry for entry in _ENTRIES}


def make_finding(
    check_id: str, path: str, message: str, fix: str, severity: Severity | None = None
) -> Finding:
    """Build a finding for a catalogued id; the severity defaults to the catalogue's.

    An unknown id is a programming error in servecheck, so it raises instead of producing a
    finding nobody can look up.
    """
    info = CATALOGUE.get(check_id)
    if info is None:
        raise KeyError(f"preflight finding id {check_id!r} is not in the catalogue")
    return Finding(check_id, severity or info.severity, path, message, fix)
