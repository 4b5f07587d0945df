"""``python -m scripts.gpu ...``: the same as ``python -m scripts.gpu.check ...``."""

from scripts.gpu.check import main

raise SystemExit(main())
