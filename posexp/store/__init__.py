"""Durable storage of a run: atomic files, checkpoints, the run lock, the run dir's layout, its
provenance, resume and the lifecycle bookkeeping (claim, record a failure, clean up). Below the
commands and the model: nothing here imports them."""
