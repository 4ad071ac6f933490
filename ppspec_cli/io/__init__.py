"""The bottom layer: every byte ppspec reads, writes, sends or prints goes through here.

safeio (bounded reads, the one writer), netio (HTTP with a total deadline), redact (no secret in
any output), shellout (pasteable shell lines). Imports nothing of ppspec above `errors`."""
