"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.435156, bandwidth_efficiency=0.603906,
                        layer_us=101.328125, collective_us=0.0,
                        request_ms=403.515625, expert_efficiency=1.0,
                        rows='fitted on 38 calibration rows of benchmarks/serving'),
    'trtllm': Calibration(prefill_efficiency=0.492188, bandwidth_efficiency=0.519531,
                        layer_us=24.84375, collective_us=6.484375,
                        request_ms=196.484375, expert_efficiency=0.919531,
                        rows='fitted on 388 calibration rows of benchmarks/serving'),
    'vllm': Calibration(prefill_efficiency=0.778125, bandwidth_efficiency=0.804688,
                        layer_us=67.5, collective_us=2.890625,
                        request_ms=58.203125, expert_efficiency=0.328906,
                        rows='fitted on 90 calibration rows of benchmarks/serving'),
}
