"""The GPU harness: the parts that check posexp's training and evaluation claims on a GPU
(``check``), the head ablation and its plan (``ablation``, ``plan``), what they share
(``common``), the report (``report``). ``python -m scripts.gpu`` runs ``check``."""
