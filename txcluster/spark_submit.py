"""spark-submit's entry point: ``spark-submit [options] txcluster/spark_submit.py load|audit
ARGS`` runs ``txcluster load``/``txcluster audit`` in the session spark-submit made.

spark-submit ships nothing by itself: give it what ``txcluster spark-env`` prints
(``--archives ...#environment --py-files ... --conf spark.pyspark.python=... --conf
spark.pyspark.driver.python=...``: the driver runs the Python that has txcluster
installed); see docs/design/pipeline-on-spark.md.
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    # Run as a script, this file's directory is sys.path[0]: its modules (load, session,
    # ...) would shadow top-level names. The checkout it lives in is importable instead.
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    sys.path.insert(0, os.path.dirname(here))
    from txcluster.cli import main as cli

    cli(args=sys.argv[1:] if argv is None else argv, prog_name="spark_submit.py")


if __name__ == "__main__":
    main()
