"""`python -m tests.attack.run [MECHANISM...]`: run the generated cases, print counts per mechanism
and class and every problem; exit 1 when there is one."""

from __future__ import annotations

import sys

from tests.attack import cases


def main(argv: list[str]) -> int:
    names = argv or list(cases.MECHANISMS)
    bad_total = 0
    for name in names:
        res = cases.run_mechanism(name)
        n = sum(v[0] for v in res.values())
        bad = sum(len(v) - 1 for v in res.values())
        bad_total += bad
        print(f"{name}: {n} cases, {bad} problems")
        for cls, v in sorted(res.items()):
            print(f"  {cls}: {v[0]} cases, {len(v) - 1} problems")
            for p in v[1:21]:
                print(f"    {p}")
    return 1 if bad_total else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
