"""One module per CLI command: each takes typed arguments, calls the layers below and returns an
exit code. cli.py only declares the commands and wires them here."""
