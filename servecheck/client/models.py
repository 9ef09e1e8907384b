"""Which model a run sends to, and why: the one model discovery every runner uses.

Order: the model given explicitly (``--model``, ``SERVECHECK_MODEL``), else the first of the
target's ``models`` in targets.yaml, else the first id ``GET /v1/models`` lists. The choice
carries its source, so a run can say what it chose; nothing is ever guessed (no "default"
model): when the listing fails the caller gets a :class:`UsageError` naming the fix.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import httpx

from servecheck.client.factory import ClientSettings, sync_client
from servecheck.config.model import Target, pooling_kind
from servecheck.errors import SpecError, UsageError, did_you_mean
from servecheck.redact import redact


class NoAnswer(UsageError):
    """The target accepted the connection but sent no answer in time: the target is down, not
    the user's input (a load run reports it as a down target, exit 1). A UsageError subclass so
    that a caller that does not tell the two apart still stops with one line."""


@dataclass(slots=True, frozen=True)
class ModelChoice:
    """The model and where it came from (``given``, ``targets.yaml`` or ``/v1/models``)."""

    model: str
    source: str

    def line(self) -> str:
        return f"model {self.model} ({self.source})"


def choose_model(
    base_url: str,
    headers: Mapping[str, str],
    *,
    explicit: str | None = None,
    declared: Sequence[str] = (),
    timeout_s: float = 10.0,
    what: str = "the target",
    verify_tls: bool = True,
) -> ModelChoice:
    """See the module docstring; ``what`` names the target in the error."""
    if explicit:
        return ModelChoice(explicit, "given")
    if declared:
        return ModelChoice(declared[0], "the first of the target's models in targets.yaml")
    url = base_url.rstrip("/") + "/models"
    try:
        # never an embedding or rerank model: a chat run sent there only gets errors
        ids = [m for m, pooling in _listed(url, headers, timeout_s, verify_tls) if not pooling]
        if not ids:
            raise ValueError("an empty list")
    except httpx.TimeoutException:
        raise NoAnswer(
            f"{what} did not answer: GET {redact(url)} got no answer within {timeout_s:g} s "
            "(the connection was accepted)"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any failure means the same to the user
        why = (
            str(exc)
            if isinstance(exc, ValueError) and str(exc) == "an empty list"
            else type(exc).__name__
        )
        raise SpecError(
            "{what}: cannot list models at {url} ({why}); set models: in targets.yaml or pass {model}",
            what=what,
            url=redact(url),
            why=why,
        ) from None
    more = f" of {len(ids)}: {', '.join(ids[:5])}" if len(ids) > 1 else ""
    return ModelChoice(ids[0], f"the first that GET /v1/models lists{more}")


def _listed(
    url: str, headers: Mapping[str, str], timeout_s: float, verify_tls: bool
) -> list[tuple[str, bool]]:
    """``GET url`` (a /v1/models): each model id and whether it is a pooling model; raises on
    a failed listing (httpx's errors, a body that is not a listing)."""
    settings = ClientSettings.for_url(
        url, dict(headers), timeout_s=timeout_s, connect_timeout_s=timeout_s, verify_tls=verify_tls
    )
    with sync_client(settings, bound_body=True) as client:  # a listing that never ends
        r = client.get(url)
    return [(str(m["id"]), bool(pooling_kind(m))) for m in r.json()["data"]]


def unlisted_model(target: Target, model: str, timeout_s: float) -> str | None:
    """Why ``model`` is likely not served: it is not among the ids ``GET /v1/models`` lists
    (a few named, the closest as "did you mean"); None when it is listed, or when the listing
    cannot be read (then nothing is known). A gateway may serve models it does not list, so this
    is said, never a refusal."""
    url = target.base_url.rstrip("/") + "/models"
    headers = {**target.headers, **target.auth_headers()}
    try:
        ids = [m for m, _ in _listed(url, headers, timeout_s, target.verify_tls)]
    except Exception:  # noqa: BLE001 - an unreadable listing tells nothing about the model
        return None
    if model in ids or not ids:
        return None
    named = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
    return f"model {model!r} is not among the models GET /v1/models lists ({named}){did_you_mean(model, ids)}"


def model_for_target(target: Target, explicit: str | None = None) -> ModelChoice:
    """:func:`choose_model` for a target of targets.yaml."""
    return choose_model(
        target.base_url,
        {**target.headers, **target.auth_headers()},
        explicit=explicit,
        declared=target.models or (),
        timeout_s=target.connect_timeout_s,
        what=f"target {target.name!r}",
        verify_tls=target.verify_tls,
    )


__all__ = ["ModelChoice", "NoAnswer", "choose_model", "model_for_target", "unlisted_model"]
