"""Prompts from your own dataset file (JSONL or ShareGPT), sampled with the run's seed.

    SERVECHECK_DATASET=my_prompts.jsonl servecheck load --target local --scenario dataset --users 8 --duration 2m
    SERVECHECK_DATASET=sharegpt.json servecheck load --target local --scenario multi_turn ...   # whole conversations

Each request is an item's first user turn (after its system prompt, if it has one); ``max_tokens``
is the item's own, else its reference answer's length, else SERVECHECK_DATASET_MAX_TOKENS (128).
Nothing is downloaded. Formats: servecheck/load/workload/dataset.py.
"""

import locust  # noqa: F401,I001 - first: gevent monkey-patching before anything else

from servecheck.load.workload.dataset import DatasetMixin
from servecheck.load.generator.locust_user import LLMUser, scenario_shape
from servecheck.scenarios._options import add_options  # noqa: F401 - plain locust -f's options


class DatasetUser(DatasetMixin, LLMUser):
    scenario = "dataset"


LoadShape = scenario_shape()
