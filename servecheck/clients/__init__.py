"""Real agent clients against a target (``servecheck clients``, issue 44): each installed on
demand into servecheck's cache, run on a scripted task inside a network namespace that reaches
the target and nothing else (:mod:`servecheck.clients.netns`), and judged per client."""
