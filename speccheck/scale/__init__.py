"""Scale-out: units of work, executors (in-process or Dask), the results store, and the heavy jobs
(calibration, mutant matrices, sweeps) built on them."""
