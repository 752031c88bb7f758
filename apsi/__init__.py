"""apsi: plan large-model training and serving (memory per GPU, layout, GPU count, days).

The public API lives in apsi.scale and is re-exported here: plan, evaluate, inference,
gpu_table. Errors a user can cause are ApsiError, a ValueError.
"""

from apsi.errors import ApsiError
from apsi.scale import evaluate, gpu_table, inference, plan

__version__ = "0.1.0"
__all__ = ["ApsiError", "evaluate", "gpu_table", "inference", "plan", "__version__"]
