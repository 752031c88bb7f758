"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.420313, bandwidth_efficiency=0.892187,
                        layer_us=114.609375, collective_us=0.0,
                        request_ms=332.421875, expert_efficiency=1.0,
                        stream_us=47.734375, sequence_us=28.28125,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.523438, bandwidth_efficiency=0.578125,
                        layer_us=22.8125, collective_us=7.34375,
                        request_ms=178.515625, expert_efficiency=0.994531,
                        stream_us=51.25, sequence_us=13.28125,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.695313, bandwidth_efficiency=0.720313,
                        layer_us=39.765625, collective_us=6.875,
                        request_ms=63.671875, expert_efficiency=0.352344,
                        stream_us=0.0, sequence_us=0.0,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
