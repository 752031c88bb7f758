"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.244531, bandwidth_efficiency=0.566406,
                        layer_us=88.203125, collective_us=0.0,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.489844, bandwidth_efficiency=0.499219,
                        layer_us=16.09375, collective_us=10.546875,
                        rows='fitted on 353 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.592187, bandwidth_efficiency=0.486719,
                        layer_us=0.0, collective_us=10.625,
                        rows='fitted on 93 calibration rows of benchmarks/serving'),
}
