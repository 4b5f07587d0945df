"""`posexp eval-extrapolate`: plan (what to score), score (losses over windows), tasks (accuracy
of synthetic-task runs), outputs and plots (what it writes), evaluate (the command itself)."""
