"""A run's records as Arrow columns and back: the schema of ``records.parquet`` and its codec.

What each column holds, and why (records/parquet.py writes and reads the file): times are integer
microseconds (what :meth:`RequestRecord.to_json` keeps: it rounds to 6 decimals),
delta-encoded (the ITL lists byte-stream split: :func:`writer_options`); low-cardinality strings are dictionary-encoded. Values that follow from others
are stored as the small rest: ``lag`` is ``t_sent - t_intended`` (and gives ``t_intended``
back), ``t_done`` is stored less ``t_sent + e2e``, ``ttfa`` less ``ttft``, ``tpot`` less
``(e2e - ttft) / (tokens - 1)``, ``request_id`` as its prefix before ``-<seq>``, a
``response_id`` that ends with the request id (vLLM's ``chatcmpl-<X-Request-Id>``) as its
prefix, an echoed request id equal to the sent one as a flag; ``token_discrepancy`` is
recomputed. ``stamps`` (ms from t0) are one column per known phase, ``body`` less ``ttft``,
``headers`` less ``body``, ``last_token`` less ``e2e``. Anything else (an unknown key, a value
of an unexpected type, a derived value that does not match) goes into one JSON column,
``extra``, and comes back as it was: nothing is lost (seconds written as an int, such as a
whole ``retry_after_s``, come back as the equal float).

It imports nothing of servecheck's (``records.to_dataframe`` reads a Parquet path through it),
and pyarrow / pandas only inside its functions.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any, Final

BATCH_ROWS: Final = 8_192  # rows per batch when reading back (128-token rows: ~20 MB as dicts)
ZSTD_LEVEL: Final = 9

_US = 1_000_000.0
_STR = ("target", "scenario", "kind", "worker", "error", "error_message", "conversation",
        "prefix_group", "image_size", "model", "cancelled", "served_model", "finish_reason",
        "outcome", "session", "parent", "session_end")  # fmt: skip
_INT = ("seq", "output_tokens", "output_tokens_client", "prompt_tokens", "status",
        "reasoning_tokens", "reasoning_tokens_client", "cached_tokens", "turn", "history_tokens",
        "images", "text_tokens", "branch", "context_tokens")  # fmt: skip
_BOOL = ("abandoned", "new_conn")
_SECONDS = ("t_sent", "ttft", "e2e", "tpot", "retry_after_s", "ttfr", "tool_wait_s")
_LISTS = ("itls", "itls_reasoning", "itls_answer")
_STAMPS = ("connect", "tls", "written", "headers", "body", "last_token")  # analysis/timings.py
_REST = ("lag", "t_done", "ttfa")  # stored as a difference from other columns (docstring)
# Stamps stored less another time, in the order they are rebuilt (a base before what uses it).
_STAMP_BASES = (("body", "ttft"), ("headers", "body"), ("last_token", "e2e"))
_PREFIXES = ("rid_prefix", "resp_prefix")  # request_id before "-<seq>"; response_id before it
_PLAIN = ("request_id", "request_id_echo", "response_id", "extra")

# The keys to_json always writes, in its order; the others are written only when set.
_ALWAYS = ("target", "scenario", "kind", "worker", "seq", "request_id", "t_intended", "t_sent",
           "t_done", "lag", "ttft", "e2e", "tpot", "itls", "output_tokens",
           "output_tokens_client", "token_discrepancy", "prompt_tokens", "status", "error",
           "error_message", "abandoned", "retry_after_s", "ttfa")  # fmt: skip
_WHEN_SET = ("cached_tokens", "conversation", "turn", "history_tokens", "prefix_group", "images",
             "image_size", "cancelled", "text_tokens", "stamps", "new_conn", "request_id_echo",
             "response_id", "reasoning_tokens", "model", "served_model", "finish_reason",
             "outcome", "session", "branch", "parent", "context_tokens", "tool_wait_s",
             "session_end")  # fmt: skip
_REASONING = ("ttfr", "reasoning_tokens_client", "itls_reasoning", "itls_answer")
KEYS: Final = (*_ALWAYS, *_WHEN_SET, *_REASONING)
_KNOWN = frozenset(KEYS)
SORT_KEY = (("t_sent", "ascending"), ("worker", "ascending"), ("seq", "ascending"))

# Physical columns each record key is read from.
_NEEDS: dict[str, tuple[str, ...]] = {
    "t_intended": ("t_sent", "lag"),
    "t_done": ("t_sent", "e2e", "t_done"),
    "ttfa": ("ttft", "ttfa"),
    "tpot": ("tpot", "e2e", "ttft", "output_tokens", "output_tokens_client"),
    "request_id": ("rid_prefix", "request_id", "seq"),
    "request_id_echo": ("echo_same", "request_id_echo", "rid_prefix", "request_id", "seq"),
    "response_id": ("resp_prefix", "response_id", "rid_prefix", "request_id", "seq"),
    "token_discrepancy": ("output_tokens", "output_tokens_client"),
    "stamps": ("has_stamps", "ttft", "e2e", *(f"stamp_{k}" for k in _STAMPS)),
    **{k: (k, "reasoning_tokens_client") for k in _REASONING},
}


def schema() -> Any:
    import pyarrow as pa

    cols: list[Any] = [pa.field(k, pa.string()) for k in _STR]
    cols += [pa.field(k, pa.int64()) for k in _INT]
    cols += [pa.field(k, pa.bool_()) for k in (*_BOOL, "has_stamps", "echo_same")]
    cols += [pa.field(k, pa.int64()) for k in (*_SECONDS, *_REST)]
    cols += [pa.field(f"stamp_{k}", pa.int64()) for k in _STAMPS]
    cols += [pa.field(k, pa.list_(pa.int32())) for k in _LISTS]
    cols += [pa.field(k, pa.string()) for k in (*_PREFIXES, *_PLAIN)]
    return pa.schema(cols, metadata={"servecheck": "records/1 (servecheck/records/columns.py)"})


def writer_options() -> dict[str, Any]:
    """zstd; dictionaries for the repeated strings; delta encoding for the integers (times and
    counts: neighbouring values are close); the ITL lists' microseconds byte-stream split.

    Why split and not delta for the ITLs: a token that comes late makes its gap longer and the
    next one shorter, so neighbouring ITLs are anti-correlated and their differences spread
    twice as wide as the gaps themselves. Split into byte planes, the gaps' high bytes are
    nearly constant and zstd takes them to almost nothing: on a 64-token calibration run with
    ~1 ms jitter the ITLs took 49 bytes a request split, 67 plain and 97 delta-encoded."""
    delta = [*_INT, *_SECONDS, *_REST, *(f"stamp_{k}" for k in _STAMPS)]
    encoding = dict.fromkeys(delta, "DELTA_BINARY_PACKED")
    encoding |= {f"{k}.list.element": "BYTE_STREAM_SPLIT" for k in _LISTS}
    return {
        "compression": "zstd",
        "compression_level": ZSTD_LEVEL,
        "use_dictionary": [*_STR, *_PREFIXES],
        "column_encoding": encoding,
        "data_page_size": 256 << 10,  # smaller pages: a merge by send time holds one per stream
    }


# ------------------------------------------------------------------ dicts -> columns


class _Columns:
    """One chunk's columns being built, and the values that go to ``extra`` instead."""

    def __init__(self, rows: list[dict[str, Any]] | None, table: Any = None) -> None:
        """From parsed dicts, or from the table pyarrow's JSON reader made of the lines (the
        common case: faster, and every value already of its JSON type)."""
        import pyarrow as pa

        self.pa = pa
        self.rows = rows
        self.table = table
        self.n = len(rows) if rows is not None else table.num_rows
        self.extra: list[dict[str, Any] | None] = [None] * self.n
        self.out: dict[str, Any] = {}

    def values(self, key: str) -> list[Any]:
        """Each row's ``key`` as Python values (None where absent)."""
        if self.rows is not None:
            return [r.get(key) for r in self.rows]
        if key not in self.table.column_names:
            return [None] * self.n
        return self.table.column(key).to_pylist()

    def value(self, i: int, key: str) -> Any:
        if self.rows is not None:
            return self.rows[i].get(key)
        return self.table.column(key)[i].as_py() if key in self.table.column_names else None

    def put_extra(self, i: int, key: str, value: Any) -> None:
        slot = self.extra[i]
        if slot is None:
            slot = self.extra[i] = {}
        slot[key] = value

    def typed(self, key: str, typ: Any, values: list[Any] | None = None) -> Any:
        """``values`` (default: each row's ``key``) as an Arrow array of ``typ``; a value that
        does not fit is stored null and kept in ``extra``. (A bool where a float is due is
        taken as 0.0 / 1.0, which compare equal to it.)"""
        pa = self.pa
        if values is None and self.table is not None:
            if key not in self.table.column_names:
                return pa.nulls(self.n, typ)
            return self.table.column(key).combine_chunks().cast(typ)
        vals = self.values(key) if values is None else values
        numeric = pa.types.is_integer(typ)
        try:
            return pa.array(vals, type=typ)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
            pass
        clean: list[Any] = []
        for i, v in enumerate(vals):
            if v is None or _fits(pa, v, typ, numeric):
                clean.append(v)
            else:
                clean.append(None)
                self.put_extra(i, key, v)
        return pa.array(clean, type=typ)

    def micros(self, key: str, scale: float = _US, values: Any = None) -> Any:
        """Seconds (or ``scale`` units per microsecond) as int64 microseconds."""
        import pyarrow.compute as pc

        pa = self.pa
        f = self.typed(key, pa.float64()) if values is None else values
        finite = pc.fill_null(pc.is_finite(f), True)
        if not pc.all(finite).as_py():
            for i in pc.indices_nonzero(pc.invert(finite)).to_pylist():
                self.put_extra(i, key, self.value(i, key))
            f = pc.if_else(finite, f, None)
        return pc.cast(pc.round(pc.multiply(f, scale)), pa.int64())

    def micro_lists(self, key: str) -> Any:
        """Lists of seconds as lists of int32 microseconds; a list that does not fit is kept
        whole in ``extra``."""
        import pyarrow.compute as pc

        pa = self.pa
        arr = self.typed(key, pa.list_(pa.float64()))
        flat = arr.values
        us = pc.round(pc.multiply(flat, _US))
        ok = pc.and_(pc.is_finite(us), pc.less(pc.abs(us), 2.0**31))
        if not pc.all(pc.fill_null(ok, True)).as_py():
            bad_rows = [i for i, v in enumerate(arr.to_pylist()) if v and not _int32_list(v)]
            for i in bad_rows:
                self.put_extra(i, key, self.value(i, key))
            keep = [None if i in set(bad_rows) else v for i, v in enumerate(arr.to_pylist())]
            arr = pa.array(keep, type=pa.list_(pa.float64()))
            us = pc.round(pc.multiply(arr.values, _US))
        mask = arr.is_null() if arr.null_count else None
        return pa.ListArray.from_arrays(arr.offsets, pc.cast(us, pa.int32()), mask=mask)


def _json_stamps() -> Any:
    import pyarrow as pa

    return pa.struct([(k, pa.float64()) for k in _STAMPS])


def _json_schema() -> Any:
    """A JSON line's types, for pyarrow's JSON reader: a line with any other key or type is
    refused, and its chunk is parsed line by line instead (:func:`table_of` on the dicts)."""
    import pyarrow as pa

    f64 = pa.float64()
    cols: list[Any] = [(k, pa.string()) for k in _STR]
    cols += [(k, pa.string()) for k in ("request_id", "request_id_echo", "response_id")]
    cols += [(k, pa.int64()) for k in (*_INT, "token_discrepancy")]
    cols += [(k, pa.bool_()) for k in _BOOL]
    cols += [(k, f64) for k in (*_SECONDS, "t_intended", "t_done", "ttfa", "lag")]
    cols += [(k, pa.list_(f64)) for k in _LISTS]
    cols.append(("stamps", _json_stamps()))
    return pa.schema(cols)


def json_table(data: bytes) -> _Columns | None:
    """JSONL bytes parsed by pyarrow (multi-threaded, straight into columns), or None when a
    line is not a record of the expected shape (a torn line, an unknown key, another type)."""
    import io

    import pyarrow as pa
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=_json_schema(), unexpected_field_behavior="error")
    read = pj.ReadOptions(block_size=4 << 20)
    try:
        table = pj.read_json(io.BytesIO(data), read_options=read, parse_options=options)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None
    return _Columns(None, table)


def _fits(pa: Any, v: Any, typ: Any, numeric: bool) -> bool:
    if numeric and isinstance(v, bool):
        return False
    try:
        pa.array([v], type=typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, OverflowError):
        return False
    return True


def _int32_list(v: list[Any]) -> bool:
    return all(
        isinstance(x, int | float)
        and not isinstance(x, bool)
        and math.isfinite(x)
        and abs(round(x * _US)) < 2**31
        for x in v
    )


def table_of(rows: list[dict[str, Any]] | _Columns, schema: Any) -> Any:
    """One chunk of record dicts (or of :func:`json_table`'s) as an Arrow table of
    :func:`schema`."""
    import pyarrow.compute as pc

    c = rows if isinstance(rows, _Columns) else _Columns(rows)
    pa, out = c.pa, c.out
    for k in _STR:
        out[k] = c.typed(k, pa.string())
    for k in _INT:
        out[k] = c.typed(k, pa.int64())
    for k in _BOOL:
        out[k] = c.typed(k, pa.bool_())
    for k in _SECONDS:
        out[k] = c.micros(k)
    for k in _LISTS:
        out[k] = c.micro_lists(k)
    sent, e2e, ttft = out["t_sent"], out["e2e"], out["ttft"]
    out["lag"] = _rest(c, "t_intended", pc.subtract(sent, c.micros("t_intended")))
    done = pc.subtract(pc.subtract(c.micros("t_done"), sent), pc.fill_null(e2e, 0))
    out["t_done"] = _rest(c, "t_done", done)
    out["ttfa"] = pc.subtract(c.micros("ttfa"), pc.fill_null(ttft, 0))
    out["tpot"] = pc.subtract(out["tpot"], _tpot_base(out))
    _check_derived(c)
    _ids(c)
    _stamps(c)
    for i, r in enumerate(c.rows or ()):  # the JSON reader refused unknown keys
        if not _KNOWN.issuperset(r):
            for k, v in r.items():
                if k not in _KNOWN:
                    c.put_extra(i, k, v)
    out["extra"] = pa.array(
        [None if e is None else json.dumps(e, separators=(",", ":")) for e in c.extra],
        type=pa.string(),
    )
    return pa.table([out[f.name] for f in schema], schema=schema)


def _rest(c: _Columns, key: str, stored: Any) -> Any:
    """A value stored relative to ``t_sent``: where ``t_sent`` is missing and the value is not,
    the value goes to ``extra`` (it cannot be rebuilt)."""
    import pyarrow.compute as pc

    for i in pc.indices_nonzero(pc.is_null(stored)).to_pylist():
        value = c.value(i, key)
        if value is not None:
            c.put_extra(i, key, value)
    return stored


def _tpot_base(col: Any) -> Any:
    """What ``tpot`` is within a microsecond, from the stored columns (``col[name]``):
    ``(e2e - ttft) / (tokens - 1)``, tokens the usage's else the client's count; else 0."""
    import pyarrow.compute as pc

    n = pc.coalesce(col["output_tokens"], col["output_tokens_client"])
    span = pc.cast(pc.subtract(col["e2e"], col["ttft"]), "float64")
    base = pc.round(pc.divide(span, pc.cast(pc.subtract(n, 1), "float64")))
    base = pc.if_else(pc.greater_equal(n, 2), base, None)
    return pc.fill_null(pc.cast(base, "int64"), 0)


def _check_derived(c: _Columns) -> None:
    """``lag`` and ``token_discrepancy`` are rebuilt on reading; a record whose own value
    differs (by more than a microsecond for ``lag``) keeps it in ``extra``."""
    out = c.out
    lag = out["lag"].to_pylist()
    tokens, client = out["output_tokens"].to_pylist(), out["output_tokens_client"].to_pylist()
    given_tokens = c.values("token_discrepancy")
    for i, given in enumerate(c.values("lag")):
        if given is not None:
            ok = (
                lag[i] is not None
                and isinstance(given, int | float)
                and not isinstance(given, bool)
            )
            if not ok or not math.isfinite(given) or abs(round(given * _US) - lag[i]) > 1:
                c.put_extra(i, "lag", given)
        if given_tokens[i] is not None:
            want = None if tokens[i] is None or client[i] is None else tokens[i] - client[i]
            if given_tokens[i] != want:
                c.put_extra(i, "token_discrepancy", given_tokens[i])


def _ids(c: _Columns) -> None:
    """``request_id`` as the prefix before ``-<seq>`` (one dictionary entry per worker); the
    echoed id as a flag when it is the one sent."""
    pa, out = c.pa, c.out
    seqs = out["seq"].to_pylist()
    prefix: list[str | None] = []
    whole: list[Any] = []
    same: list[bool | None] = []
    echo: list[Any] = []
    resp_prefix: list[str | None] = []
    resp: list[Any] = []
    sent_ids, echoes, body_ids = (
        c.values(k) for k in ("request_id", "request_id_echo", "response_id")
    )
    for rid, seq, e, body_id in zip(sent_ids, seqs, echoes, body_ids, strict=True):
        tail = f"-{seq}"
        if isinstance(rid, str) and seq is not None and rid.endswith(tail):
            prefix.append(rid[: -len(tail)])
            whole.append(None)
        else:
            prefix.append(None)
            whole.append(rid)
        same.append(None if e is None else e == rid)
        echo.append(None if e is None or e == rid else e)
        if isinstance(body_id, str) and isinstance(rid, str) and rid and body_id.endswith(rid):
            resp_prefix.append(body_id[: -len(rid)])
            resp.append(None)
        else:
            resp_prefix.append(None)
            resp.append(body_id)
    out["rid_prefix"] = pa.array(prefix, type=pa.string())
    out["request_id"] = c.typed("request_id", pa.string(), whole)
    out["echo_same"] = pa.array(same, type=pa.bool_())
    out["request_id_echo"] = c.typed("request_id_echo", pa.string(), echo)
    out["resp_prefix"] = pa.array(resp_prefix, type=pa.string())
    out["response_id"] = c.typed("response_id", pa.string(), resp)


def _stamps(c: _Columns) -> None:
    """``stamps`` (ms from t0, 3 decimals) as one int64 microsecond column per known phase;
    a dict with other keys or values is kept whole in ``extra``."""
    import pyarrow.compute as pc

    pa, out = c.pa, c.out
    if c.rows is None:  # the JSON reader's struct: known phases only, numbers only
        col = c.typed("stamps", _json_stamps())
        out["has_stamps"] = pc.is_valid(col)
        per = dict(zip(_STAMPS, col.flatten(), strict=True))
        _stamp_columns(c, per)
        return
    has: list[bool] = []
    for i, r in enumerate(c.rows):
        s = r.get("stamps")
        fits = isinstance(s, dict) and _stamp_values(s)
        if s is not None and not fits:
            c.put_extra(i, "stamps", s)
        has.append(fits)
    out["has_stamps"] = pa.array(has, type=pa.bool_())
    per = {
        k: pa.array(
            [r["stamps"].get(k) if h else None for r, h in zip(c.rows, has, strict=True)],
            type=pa.float64(),
        )
        for k in _STAMPS
    }
    _stamp_columns(c, per)


def _stamp_columns(c: _Columns, per: dict[str, Any]) -> None:
    """Each phase's ms as microseconds, less the time it follows (:data:`_STAMP_BASES`)."""
    import pyarrow.compute as pc

    out = c.out
    us = {k: c.micros(f"stamps.{k}", 1000.0, per[k]) for k in _STAMPS}
    for k, base in _STAMP_BASES:
        out[f"stamp_{k}"] = pc.subtract(
            us[k], pc.fill_null(out[base] if base in out else us[base], 0)
        )
    for k in _STAMPS:
        out.setdefault(f"stamp_{k}", us[k])


def _stamp_values(s: dict[str, Any]) -> bool:
    """Known phases with finite numbers (the fast path has checked they are numbers)."""
    if not _STAMP_SET.issuperset(s):
        return False
    try:
        return all(map(math.isfinite, s.values())) and bool not in set(map(type, s.values()))
    except TypeError:
        return False


_STAMP_SET = frozenset(_STAMPS)


def physical_columns(keys: Sequence[str]) -> list[str]:
    wanted: dict[str, None] = {}
    for k in keys:
        for col in _NEEDS.get(k, (k,)):
            wanted[col] = None
    wanted["extra"] = None
    names = set(schema().names)
    return [c for c in wanted if c in names]


def _seconds(pc: Any, arr: Any, scale: float = _US) -> Any:
    return pc.divide(pc.cast(arr, "float64"), scale)


def _logical(batch: Any, keys: Sequence[str]) -> dict[str, Any]:
    """The batch's columns as Arrow arrays per record key (times back in float seconds);
    ``stamps`` is left to :func:`_stamp_dicts` (dicts with only the phases measured)."""
    import pyarrow.compute as pc

    col = batch.column
    names = set(batch.schema.names)
    v: dict[str, Any] = {}
    for k in keys:
        if k == "token_discrepancy":
            v[k] = pc.subtract(col("output_tokens"), col("output_tokens_client"))
        elif k == "t_intended":
            v[k] = _seconds(pc, pc.subtract(col("t_sent"), col("lag")))
        elif k == "t_done":
            base = pc.add(col("t_sent"), pc.fill_null(col("e2e"), 0))
            v[k] = _seconds(pc, pc.add(base, col("t_done")))
        elif k == "ttfa":
            v[k] = _seconds(pc, pc.add(pc.fill_null(col("ttft"), 0), col("ttfa")))
        elif k in ("request_id", "request_id_echo", "response_id"):
            rid = pc.if_else(
                pc.is_null(col("rid_prefix")),
                col("request_id"),
                pc.binary_join_element_wise(col("rid_prefix"), pc.cast(col("seq"), "string"), "-"),
            )
            if k == "request_id":
                v[k] = rid
            elif k == "request_id_echo":
                v[k] = pc.if_else(col("echo_same"), rid, col(k))
            else:
                joined = pc.binary_join_element_wise(col("resp_prefix"), rid, "")
                v[k] = pc.if_else(pc.is_null(col("resp_prefix")), col(k), joined)
        elif k == "tpot":
            base = _tpot_base(
                {n: col(n) for n in ("output_tokens", "output_tokens_client", "e2e", "ttft")}
            )
            v[k] = _seconds(pc, pc.add(col(k), base))
        elif k in _SECONDS or k == "lag":
            v[k] = _seconds(pc, col(k))
        elif k in _LISTS:
            lists = col(k)
            flat = _seconds(pc, lists.values)
            v[k] = type(lists).from_arrays(lists.offsets, flat, mask=lists.is_null())
        elif k in names and k != "stamps":
            v[k] = col(k)
    return v


def _stamp_dicts(batch: Any) -> list[dict[str, float] | None]:
    import pyarrow.compute as pc

    col = batch.column
    has = col("has_stamps").to_pylist()
    us = {k: col(f"stamp_{k}") for k in _STAMPS}
    for k, base in _STAMP_BASES:
        us[k] = pc.add(us[k], pc.fill_null(col(base) if base in ("ttft", "e2e") else us[base], 0))
    per = [(k, _seconds(pc, us[k], 1000.0).to_pylist()) for k in _STAMPS]
    return [
        {k: vals[i] for k, vals in per if vals[i] is not None} if h else None
        for i, h in enumerate(has)
    ]


def _extras(batch: Any, wanted: frozenset[str] | None) -> Iterator[tuple[int, dict[str, Any]]]:
    """(row, the keys of ``extra`` that are wanted: all when ``wanted`` is None)."""
    for i, text in enumerate(batch.column("extra").to_pylist()):
        if text is not None:
            found = json.loads(text)
            if wanted is not None:
                found = {k: x for k, x in found.items() if k in wanted}
            if found:
                yield i, found


def dicts_of(batch: Any, keys: Sequence[str], everything: bool) -> Iterator[dict[str, Any]]:
    arrays = _logical(batch, keys)
    v = {k: a.to_pylist() for k, a in arrays.items()}
    if "stamps" in keys:
        v["stamps"] = _stamp_dicts(batch)
    extra = dict(_extras(batch, None if everything else frozenset(keys)))
    always = [(k, v[k]) for k in keys if k in _ALWAYS]
    when_set = [(k, v[k]) for k in keys if k in _WHEN_SET]
    reasoning = [(k, v[k]) for k in keys if k in _REASONING]
    marker = batch.column("reasoning_tokens_client").to_pylist() if reasoning else None
    for i in range(batch.num_rows):
        d = {k: vals[i] for k, vals in always}
        for k, vals in when_set:
            if vals[i] is not None:
                d[k] = vals[i]
        if marker is not None and marker[i] is not None:
            for k, vals in reasoning:
                d[k] = vals[i]
        if i in extra:
            d.update(extra[i])
        yield d


def frame_of(batch: Any) -> Any:
    """One batch as a pandas DataFrame with the record keys as columns, like a frame made from
    the JSONL dicts: a key no row has set is no column; ``extra`` keys become columns."""
    import pandas as pd
    import pyarrow as pa

    arrays = _logical(batch, KEYS)
    table = pa.table({k: arrays[k] for k in KEYS if k in arrays})
    df = table.to_pandas()
    df["stamps"] = _stamp_dicts(batch)
    unset = [k for k in (*_WHEN_SET, *_REASONING) if not df[k].notna().any()]
    df = df.drop(columns=unset)
    for i, found in _extras(batch, None):
        for k, x in found.items():
            if k not in df:
                df[k] = pd.Series([None] * len(df), dtype=object)
            elif df[k].dtype != object and not isinstance(x, int | float):
                df[k] = df[k].astype(object)
            df.at[i, k] = x
    return df


def parquet_frame(path: str | os.PathLike[str]) -> Any:
    """A ``records.parquet`` as a pandas DataFrame whose columns are the record keys (times in
    seconds, ITLs as lists of seconds), as :func:`records.to_dataframe` makes from dicts; read
    batch by batch, converted in Arrow, so the frame is the only full copy."""
    import pandas as pd
    import pyarrow.parquet as pq

    pf = pq.ParquetFile(path)
    frames = [frame_of(b) for b in pf.iter_batches(batch_size=BATCH_ROWS)]
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
