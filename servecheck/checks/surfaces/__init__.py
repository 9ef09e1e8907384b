"""One module per surface; importing this package registers every check."""

from servecheck.checks.surfaces import health, models, chat, json_mode, tools, context, errors, auth, concurrency, fuzz, stream, client  # noqa: F401
