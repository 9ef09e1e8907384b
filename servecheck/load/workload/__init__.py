"""What a load run asks for: prompts, datasets, conversations, traces, images, lengths, model
mixes, arrival schedules and phased profiles, and the cancellation rule.

Pure: nothing here imports ``locust`` or ``gevent``, so a workload can be planned, validated
and tested without a running load.
"""
