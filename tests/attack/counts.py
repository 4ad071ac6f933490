"""Cases and problems per (mechanism, class) of this session, filled by test_suite.py."""

COUNTS: dict[tuple[str, str], tuple[int, int]] = {}
