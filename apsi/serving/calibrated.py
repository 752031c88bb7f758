"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_fit.py from the calibration rows of benchmarks/serving (its README
says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    "vllm": Calibration(prefill_efficiency=0.6, bandwidth_efficiency=0.75, layer_us=20.0, collective_us=8.0,
                        rows="not yet fitted"),
    "sglang": Calibration(prefill_efficiency=0.6, bandwidth_efficiency=0.75, layer_us=20.0, collective_us=8.0,
                          rows="not yet fitted"),
    "trtllm": Calibration(prefill_efficiency=0.6, bandwidth_efficiency=0.75, layer_us=20.0, collective_us=8.0,
                          rows="not yet fitted"),
}
