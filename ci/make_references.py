"""Makes the golden references the test suite compares against (tests/golden/*.json): what
transformers, sentence-transformers and lm-eval's hf backend answer on the bundled models.

    python ci/make_references.py                 # recompute and rewrite every fixture
    python ci/make_references.py greedy beams    # only these
    python ci/make_references.py --check         # recompute; exit 1 if a fixture differs or
                                                 # its key (model digest, library versions,
                                                 # inputs) is not this machine's

Run it after changing a reference's inputs, the model conversion, or a reference library's
version; the suite itself falls back to a live computation (with a warning) until then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import golden  # noqa: E402
from tests.golden import kinds  # noqa: E402, F401 - registers every kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"any of {sorted(golden.KINDS)}")
    parser.add_argument("--check", action="store_true",
                        help="compare with the stored fixtures instead of writing them")
    args = parser.parse_args()
    names = args.names or sorted(golden.KINDS)
    unknown = sorted(set(names) - set(golden.KINDS))
    if unknown:
        parser.error(f"unknown references {unknown}; known: {sorted(golden.KINDS)}")
    failed = []
    for name in names:
        t0 = time.perf_counter()
        kind = golden.KINDS[name]
        if args.check:
            key = golden.current_key(kind)
            fixture = golden.stored(name)
            data = kind.compute(kind.inputs())
            same_key = fixture is not None and fixture[0] == key
            # Through JSON, as stored: tuples become lists, floats round-trip exactly.
            same_data = (fixture is not None
                         and json.loads(json.dumps(data)) == fixture[1])
            status = "current" if same_key and same_data else (
                "STALE KEY" if same_data else "DIFFERS")
            if status != "current":
                failed.append(name)
            print(f"{name}: {status} ({time.perf_counter() - t0:.1f} s) key {key}")
        else:
            key, _ = golden.make(name)
            print(f"{name}: written {golden.fixture_path(name)} "
                  f"({time.perf_counter() - t0:.1f} s) key {key}")
    if failed:
        print(f"make_references: {failed} not current; run python ci/make_references.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
