"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.353125, bandwidth_efficiency=0.620313,
                        layer_us=91.796875, collective_us=0.0,
                        request_ms=248.4375, expert_efficiency=1.0,
                        stream_us=50.234375,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.486719, bandwidth_efficiency=0.503125,
                        layer_us=10.0, collective_us=9.140625,
                        request_ms=149.21875, expert_efficiency=0.928906,
                        stream_us=52.1875,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.692187, bandwidth_efficiency=0.707031,
                        layer_us=35.078125, collective_us=7.578125,
                        request_ms=58.984375, expert_efficiency=0.361719,
                        stream_us=0.0,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
