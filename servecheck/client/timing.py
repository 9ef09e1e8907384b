"""Per-request timings on the monotonic clock: one vocabulary for conformance and load.

Definitions (docs/metrics.md is the user-facing version):

* ``ttft``  first non-empty content or tool-call delta minus request start. The role-only first
  chunk (``{"delta": {"role": "assistant", "content": ""}}``) is *not* a token.
* ``itl``   the gaps between consecutive token-bearing chunks after the first (a distribution,
  one value per gap; a chunk that carries several tokens is one gap).
* ``tpot``  ``(e2e - ttft) / (output_tokens - 1)``: the mean time per output token after the first.
* ``e2e``   end of body minus request start.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Timing:
    t_start: float = 0.0
    t_headers: float | None = None
    t_first_byte: float | None = None
    t_first_token: float | None = None
    t_end: float | None = None
    token_times: list[float] = field(default_factory=list)  # arrival of every token-bearing chunk

    @property
    def ttft(self) -> float | None:
        return None if self.t_first_token is None else self.t_first_token - self.t_start

    @property
    def e2e(self) -> float | None:
        return None if self.t_end is None else self.t_end - self.t_start

    @property
    def itl(self) -> list[float]:
        times = self.token_times
        return [b - a for a, b in zip(times, times[1:], strict=False)]

    def tpot(self, output_tokens: int | None) -> float | None:
        ttft, e2e = self.ttft, self.e2e
        if ttft is None or e2e is None or not output_tokens or output_tokens < 2:
            return None
        return (e2e - ttft) / (output_tokens - 1)
