"""The decoder-only transformer and the kernels it attends with.

``gpt`` is the model, read top to bottom (config, attention, MLP, block, model, generation);
``attention`` the kernels outside FlexAttention (``posexp.kernels.flex``) and the one place that
picks a kernel; ``decoding`` sampling and beam search; ``generation`` batched
prompts through the KV cache; ``attention_maps`` the weights for the report's figures. The model
knows nothing of Hydra, the CLI or TensorBoard: it takes a plain ``ModelConfig``.
"""

from posexp.model.gpt import GPT, CausalSelfAttention, KVCache, ModelConfig

__all__ = ["GPT", "CausalSelfAttention", "KVCache", "ModelConfig"]
