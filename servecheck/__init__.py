"""servecheck: acceptance, conformance and load tests for OpenAI-compatible LLM servers."""

from __future__ import annotations

__version__ = "0.1.0"
