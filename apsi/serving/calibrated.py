"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.434375, bandwidth_efficiency=0.596094,
                        layer_us=93.515625, collective_us=0.0,
                        request_ms=285.9375, expert_efficiency=1.0,
                        stream_us=40.390625,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.494531, bandwidth_efficiency=0.501563,
                        layer_us=16.796875, collective_us=8.125,
                        request_ms=144.140625, expert_efficiency=0.932813,
                        stream_us=53.28125,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.778125, bandwidth_efficiency=0.804688,
                        layer_us=67.5, collective_us=2.890625,
                        request_ms=58.203125, expert_efficiency=0.328906,
                        stream_us=0.0,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
