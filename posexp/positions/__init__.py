"""Training-position samplers: randomized positions (sorted random subsets of a larger range) and
PoSE (positional skip-wise training), each a pure function of (seed, step)."""
