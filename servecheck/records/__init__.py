"""The request record: one per finished request, the meeting point of the load generator and
the analysis.

``record`` holds :class:`~servecheck.records.record.RequestRecord`, its JSON-lines writer and
reader; ``columns`` the Arrow schema of ``records.parquet`` and its codec; ``parquet`` the
compact run file, written and read batch by batch.
"""
