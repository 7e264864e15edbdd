"""Design-space sweeps: many configurations of the designs through the synthesis flow.

- :mod:`.spec`: the YAML spec (designs, parameter grids or a random draw with a budget,
  libraries, clocks, what to measure) and its expansion into jobs.
- :mod:`.jobs`: one job on a worker (today's flow and cache, :mod:`mactile.synth.flow`);
  a failure is a record.
- :mod:`.executor`: a local process pool, or a Dask cluster (``dask.distributed``).
- :mod:`.store`: the append-only SQLite table of results (resume, instant reruns).
- :mod:`.runner`: run what is not recorded yet, with a progress line.
- :mod:`.report`: CSV, Markdown and Pareto plots per design family.

``mactile sweep SPEC.yaml -o DIR`` (:mod:`mactile.cli.sweep_cmd`) ties them together.
"""
from .spec import Job, Measure, Spec, SpecError, load_spec, parse_spec
from .runner import SweepSummary, run_sweep
from .store import DB_NAME, ResultStore

__all__ = ["Job", "Measure", "Spec", "SpecError", "load_spec", "parse_spec", "run_sweep",
           "SweepSummary", "ResultStore", "DB_NAME"]
