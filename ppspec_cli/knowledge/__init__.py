"""What ppspec knows about vLLM and model families: facts per vLLM version, adapter packs (the
family-specific knowledge), KV connectors. Data and pure lookups; no I/O beyond reading packs."""
