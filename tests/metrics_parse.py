"""Parses Prometheus text exposition from stdin with the official parser (prometheus_client)
and prints {family name: {"type": ..., "samples": [[name, labels, value], ...]}} as JSON.
Exits non-zero (with the parser's message) when the text does not parse."""
import json
import sys

from prometheus_client.parser import text_string_to_metric_families

families = {}
for family in text_string_to_metric_families(sys.stdin.read()):
    families[family.name] = {
        "type": family.type,
        "samples": [[s.name, s.labels, s.value] for s in family.samples],
    }
json.dump(families, sys.stdout)
