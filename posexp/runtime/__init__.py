"""Run infrastructure the commands share: device and placement of a job, building a run's data
and network config, its lifecycle (claim, fail, clean up), resume, sweeps, distributed training,
TensorBoard and provenance."""
