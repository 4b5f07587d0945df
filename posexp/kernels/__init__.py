"""Attention kernels that both the model and the encodings call (FlexAttention's compiled
causal kernel); they depend on torch alone."""
