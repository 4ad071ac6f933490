"""The attacker suite's counts per mechanism and class (counts.py) are printed by tests/conftest.py
after the session, summed over the workers of an xdist run."""
