"""Everything that touches vLLM itself: the in-engine plugin, patch objects, probes (tripwires).

Importing this package imports nothing heavy; each module imports vLLM only inside functions (or,
for `relay`, only when a pack's patches are loaded inside an engine).
"""
