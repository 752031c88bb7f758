"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.478906, bandwidth_efficiency=0.957031,
                        layer_us=106.484375, collective_us=0.9375,
                        request_ms=261.71875, expert_efficiency=1.0,
                        stream_us=53.90625, sequence_us=18.28125, overlap=0.25625,
                        rows='fitted on 38 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
    'trtllm': Calibration(prefill_efficiency=0.613281, bandwidth_efficiency=0.835937,
                        layer_us=35.46875, collective_us=5.546875,
                        request_ms=173.046875, expert_efficiency=0.814844,
                        stream_us=41.25, sequence_us=7.421875, overlap=0.2,
                        rows='fitted on 388 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
    'vllm': Calibration(prefill_efficiency=0.5625, bandwidth_efficiency=1.0,
                        layer_us=61.796875, collective_us=2.578125,
                        request_ms=38.28125, expert_efficiency=0.31875,
                        stream_us=38.203125, sequence_us=0.0, overlap=0.127344,
                        rows='fitted on 90 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
}
