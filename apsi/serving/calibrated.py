"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.435156, bandwidth_efficiency=0.603906,
                        layer_us=101.328125, collective_us=0.0,
                        request_ms=403.515625,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.496875, bandwidth_efficiency=0.4875,
                        layer_us=18.203125, collective_us=8.4375,
                        request_ms=162.5,
                        rows='fitted on 353 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.839844, bandwidth_efficiency=0.555469,
                        layer_us=36.015625, collective_us=5.46875,
                        request_ms=82.03125,
                        rows='fitted on 93 calibration rows of benchmarks/serving'),
}
