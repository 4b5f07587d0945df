"""posexp's benchmarks and experiment drivers, run from the repository root as modules
(``python -m scripts.bench_train``, ``python -m scripts.gpu.check``)."""
