"""What a run's records mean: statistics, steady state, SLOs, verdicts and their sections.

Everything here works on records and numbers after (or beside) a run: exact HDR percentiles
(``stats``), the streaming summary the workers keep (``aggregate``), the steady window and
time slices (``steady``), SLO expressions (``slo``), error budgets (``budget``), the verdict
model every run folds into (``verdict``), intervals over repeated runs (``intervals``), the
TTFT phases (``timings``), outages and down watches (``outage``, ``down``), what the engine
counted (``server_truth``, ``server_gauges``, ``engine_cache``) and the production breakdowns
(``breakdown``, ``image_stats``, ``phases``, ``warmup``). Nothing here sends a request.
"""
