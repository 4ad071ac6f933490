"""`ppspec bench`: the load generator (vLLM's benchmark client), results, verdict, report."""
