"""`ppspec verify`: measure speculative-decoding acceptance and parity on a live vLLM server.

Under pipeline parallelism a broken aux-state relay does not crash; it lowers acceptance. This
package turns two `/metrics` scrapes around a fixed greedy prompt run into acceptance figures,
and gates them against a baseline, a floor, and a spec-off reference.
"""
