"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.434375, bandwidth_efficiency=0.596875,
                        layer_us=92.890625, collective_us=0.0,
                        request_ms=285.9375, expert_efficiency=1.0,
                        stream_us=40.3125,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.495313, bandwidth_efficiency=0.503906,
                        layer_us=18.59375, collective_us=7.890625,
                        request_ms=144.53125, expert_efficiency=0.933594,
                        stream_us=53.203125,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.778125, bandwidth_efficiency=0.804688,
                        layer_us=67.5, collective_us=2.890625,
                        request_ms=58.203125, expert_efficiency=0.328906,
                        stream_us=0.0,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
