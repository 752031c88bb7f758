"""The serving engines' fitted timing constants (apsi.serving.engine.Calibration).

Written by benchmarks/serving_validation.py --fit from the calibration rows of benchmarks/serving (its
README says which rows are calibration and which validation); do not edit by hand: rerun the script.
"""

from apsi.serving.engine import Calibration

CALIBRATION: dict[str, Calibration] = {
    'sglang': Calibration(prefill_efficiency=0.48125, bandwidth_efficiency=0.748438,
                        layer_us=94.140625, collective_us=0.0,
                        request_ms=306.25, expert_efficiency=1.0,
                        stream_us=45.78125, sequence_us=24.765625,
                        rows='fitted on 38 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
    'trtllm': Calibration(prefill_efficiency=0.469531, bandwidth_efficiency=0.61875,
                        layer_us=16.875, collective_us=7.96875,
                        request_ms=175.0, expert_efficiency=1.0,
                        stream_us=33.4375, sequence_us=21.171875,
                        rows='fitted on 388 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
    'vllm': Calibration(prefill_efficiency=0.564844, bandwidth_efficiency=0.610937,
                        layer_us=11.640625, collective_us=10.0,
                        request_ms=50.0, expert_efficiency=0.455469,
                        stream_us=0.0, sequence_us=3.515625,
                        rows='fitted on 90 calibration rows of benchmarks/serving',
                        makers=('nvidia',)),
}
