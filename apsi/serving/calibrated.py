"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.417188, bandwidth_efficiency=0.886719,
                        layer_us=114.53125, collective_us=0.0,
                        request_ms=323.4375, expert_efficiency=1.0,
                        stream_us=47.03125, sequence_us=27.5,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.522656, bandwidth_efficiency=0.582813,
                        layer_us=32.96875, collective_us=5.234375,
                        request_ms=156.640625, expert_efficiency=0.957031,
                        stream_us=55.703125, sequence_us=12.8125,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.692187, bandwidth_efficiency=0.707031,
                        layer_us=35.078125, collective_us=7.578125,
                        request_ms=58.984375, expert_efficiency=0.361719,
                        stream_us=0.0, sequence_us=0.0,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
