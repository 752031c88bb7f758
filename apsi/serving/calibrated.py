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
    'trtllm': Calibration(prefill_efficiency=0.494531, bandwidth_efficiency=0.496875,
                        layer_us=21.5625, collective_us=7.03125,
                        request_ms=197.65625,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.788281, bandwidth_efficiency=0.547656,
                        layer_us=47.96875, collective_us=3.359375,
                        request_ms=79.296875,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
