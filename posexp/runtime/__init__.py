"""Run infrastructure the commands share: the machine (hardware, device and placement of a job),
building a run's data and network config, precision and kernels, sweeps, distributed training,
stop signals and TensorBoard."""
