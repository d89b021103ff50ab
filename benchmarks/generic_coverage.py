"""Coverage of the generic torch path over every causal-LM type transformers can build (issue 12).

Run: ``.venv/bin/python benchmarks/generic_coverage.py [--jobs 2] [TYPE ...]``. Prints one line per
type (exact total, formula in fields, verified at an independent point, cache verified) and the
percentages that README's "Any transformers model (torch)" section quotes.
"""

from __future__ import annotations

import argparse
import sys
import time
from multiprocessing import Pool


def survey(model_type: str) -> dict[str, object]:
    """One type's row: build at its default config, compare the generic path with the real counts."""
    from symbolic.core import collector
    from symbolic.networks.generic import survey as generic_survey

    with collector.opted_in():  # a worker of this script: the meta-device builds may pause the collector
        return generic_survey.survey_type(model_type)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--cache", action="store_true", help="measure the serving cache instead of the parameters")
    parser.add_argument("--json", action="store_true", help="print the rows and the coverage as one JSON object")
    args = parser.parse_args(argv)
    from symbolic.networks.generic import probes as generic
    from symbolic.networks.generic import survey as generic_survey

    types = args.types or list(generic.causal_lm_types())
    start = time.time()
    with Pool(args.jobs) as pool:
        rows = pool.map(survey if not args.cache else survey_with_cache, types, chunksize=1)
    if args.json:
        import json

        print(json.dumps({"rows": rows, "coverage": generic_survey.coverage(rows)}))
        return 0
    for r in rows:
        print(" ".join(f"{k}={v}" for k, v in r.items()), flush=True)
    print(generic_survey.coverage_text(rows))
    print(f"{time.time() - start:.0f} s", file=sys.stderr)
    return 0


def survey_with_cache(model_type: str) -> dict[str, object]:
    """The serving cache's check alone: a prefill at two lengths, confirmed at a third point."""
    from symbolic.core import collector
    from symbolic.networks.generic import cache as generic_cache
    from symbolic.networks.generic import survey as generic_survey
    from symbolic.networks.transformer.families import FAMILIES

    row: dict[str, object] = {"model_type": model_type, "table": model_type in FAMILIES}
    try:  # the denominator: types transformers builds the plain way, whether or not a prefill runs
        with collector.opted_in():
            generic_survey.plain_count(model_type)
        row["built"] = True
    except Exception:
        row["built"] = False
    row.update(generic_cache.survey_cache(model_type))
    return row


if __name__ == "__main__":
    sys.exit(main())
