"""Allure enrichment of conformance checks: title, description, labels and the HTTP exchanges.

The pytest plugin calls :func:`attach_exchanges` after a check ran (pass or fail), from the
``sc_ctx`` fixture's teardown, e.g.::

    yield ctx
    from servecheck.report.allure_glue import attach_exchanges
    attach_exchanges(ctx, sc_case.check)

Without ``allure-pytest`` installed it does nothing. Every attached text is redacted: the API
key never reaches ``allure-results/`` (request headers go through ``redact_headers`` and the
whole text through :func:`servecheck.redact.redact`).

It also writes allure results for non-pytest verdicts (load SLOs) with :func:`write_slo_results`,
so ``accept`` shows both parts in one Allure report.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from servecheck.redact import redact

MAX_BODY = 20_000


def _allure() -> Any:
    try:
        import allure
    except ImportError:
        return None
    return allure


def exchange_texts(exchange: Any) -> tuple[str, str]:
    """(request, response) of an :class:`~servecheck.client.http.Exchange` as redacted text."""
    try:
        request = json.dumps(exchange.request_record(), indent=2, ensure_ascii=False, default=str)
    except Exception:  # noqa: BLE001 - an odd body must not break the report
        request = f"{exchange.method} {exchange.url}"
    lines = []
    if exchange.error:
        lines.append(f"transport error: {exchange.error}: {exchange.error_message}")
    else:
        lines.append(f"HTTP {exchange.status}")
        for k, v in (exchange.response_headers or {}).items():
            lines.append(f"{k}: {v}")
        lines.append("")
        body = exchange.text if hasattr(exchange, "text") else ""
        lines.append(
            body if len(body) <= MAX_BODY else body[:MAX_BODY] + f"\n... ({len(body)} characters)"
        )
    timing = getattr(exchange, "timing", None)
    if timing is not None:
        lines.append("")
        lines.append(f"timing: {timing!r}")
    return redact(request)[: MAX_BODY + 2000], redact("\n".join(lines))


def attach_exchanges(ctx: Any, check: Any) -> int:
    """Give the running allure test the check's id, description and request/response attachments.

    ``ctx`` is the :class:`~servecheck.checks.context.CheckContext`; ``check`` the registry
    :class:`~servecheck.checks.registry.Check`. Returns the number of exchanges attached (0 when
    allure is not installed or not active).
    """
    allure = _allure()
    if allure is None:
        return 0
    try:
        allure.dynamic.title(f"{check.id}: {check.description}")
        allure.dynamic.description(
            f"{check.description}\n\nExpectation: {check.expectation}\n\nTarget {ctx.target.name}, model {ctx.model}, "
            f"engine {ctx.target.engine}"
        )
        allure.dynamic.label("check_id", check.id)
        allure.dynamic.label("surface", check.surface)
        allure.dynamic.label("target", ctx.target.name)
        allure.dynamic.label("model", ctx.model)
        allure.dynamic.tag(check.surface)
        allure.dynamic.parent_suite(ctx.target.name)
        allure.dynamic.suite(check.surface)
        n = 0
        for i, ex in enumerate(ctx.exchanges, 1):
            request, response = exchange_texts(ex)
            allure.attach(
                request,
                name=f"{i} request {ex.method} {redact(ex.url)}",
                attachment_type=allure.attachment_type.JSON,
            )
            allure.attach(
                response, name=f"{i} response", attachment_type=allure.attachment_type.TEXT
            )
            with contextlib.suppress(
                Exception
            ):  # a body curl cannot quote must not cost the other attachments
                allure.attach(
                    redact(ex.curl()), name=f"{i} curl", attachment_type=allure.attachment_type.TEXT
                )
            n += 1
        return n
    except Exception:  # noqa: BLE001 - reporting must never change a check's outcome
        return 0


def write_slo_results(
    alluredir: Path,
    verdicts: Sequence[dict[str, Any]],
    *,
    suite: str = "load",
    attachment: str | None = None,
) -> int:
    """Write one allure result JSON per SLO verdict (``summary.json``'s ``slo`` entries)."""
    alluredir = Path(alluredir)
    alluredir.mkdir(parents=True, exist_ok=True)
    now = int(time.time() * 1000)
    att_name = None
    if attachment:
        att_name = f"{uuid.uuid4()}-attachment.txt"
        (alluredir / att_name).write_text(redact(attachment), encoding="utf-8")
    for v in verdicts:
        name = f"SLO {v.get('slo')}"
        result = {
            "uuid": str(uuid.uuid4()),
            "historyId": f"servecheck-slo-{v.get('slo')}",
            "name": name,
            "fullName": f"{suite}.{name}",
            "status": "passed" if v.get("passed") else "failed",
            "statusDetails": {
                "message": redact(
                    f"observed {v.get('observed')} {v.get('unit')}, bound {v.get('op')} "
                    f"{v.get('bound')} ({v.get('source')}) {v.get('note') or ''}".strip()
                )
            },
            "stage": "finished",
            "start": now,
            "stop": now,
            "labels": [
                {"name": "suite", "value": suite},
                {"name": "parentSuite", "value": "servecheck"},
                {"name": "tag", "value": "SLO"},
                {"name": "check_id", "value": f"SLO-{v.get('metric')}"},
            ],
            "attachments": [{"name": "load summary", "source": att_name, "type": "text/plain"}]
            if att_name
            else [],
        }
        (alluredir / f"{result['uuid']}-result.json").write_text(
            json.dumps(result), encoding="utf-8"
        )
    return len(verdicts)


__all__ = ["attach_exchanges", "exchange_texts", "write_slo_results"]
