"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.179688, bandwidth_efficiency=1.0,
                        layer_us=0.546875, collective_us=22.34375,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.489062, bandwidth_efficiency=0.509375,
                        layer_us=13.28125, collective_us=10.625,
                        rows='fitted on 353 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.432813, bandwidth_efficiency=0.503906,
                        layer_us=0.0, collective_us=11.71875,
                        rows='fitted on 93 calibration rows of benchmarks/serving'),
}
