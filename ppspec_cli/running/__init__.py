"""plan -> launch: engine argv and environment per node, the plan file, cluster exports, the
roll call, `serve`'s supervision, and the in-engine plugin (running/engine, imported by vLLM)."""
