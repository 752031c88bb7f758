"""The step's tail: what a training step spends outside its micro-batches' compute.

Owns the pipeline's fill and drain messages, the data-parallel reduction and gather the
framework's overlap leaves exposed (per micro-batch under FSDP2 and ZeRO-3, once per step, by
model chunk under the interleaved schedule), and the optimizer step's HBM traffic, for the
slowest pipeline rank of a layout; and a lower bound on them over the data-parallel sizes from
one on, which the search's floors use. apsi.model.steptime.step_time adds them to the
micro-batches' time; what each collective costs on its link is apsi.model.collectives'. Pure
functions, no framework names: how a framework moves its states is the DpTraffic it passes in.
Source keys: docs/sources.md.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from apsi.catalog import GPU
from apsi.model.architecture import Architecture
from apsi.model.collectives import DpTraffic, _dp_part, links, send

if TYPE_CHECKING:
    from apsi.model.steptime import Shape

OPTIMIZER_BYTES_PER_PARAM = 30
"""HBM traffic of one Adam step per parameter of the rank's optimizer shard: read the fp32 master
weight, gradient and two moments (16 B), write the master weight and moments (12 B) and the bf16
weight (2 B)."""



def tail(a: Architecture, gpu: GPU, x: Shape, dense_params: float, expert_params: float, traffic: DpTraffic,
         hbm: float, n: int, compute_mb: float, used: dict | None = None) -> tuple[float, float, float]:
    """(PP fill and drain, exposed DP traffic, optimizer step) seconds of a step whose slowest rank
    holds `n` layers (MTP blocks counted) and computes `compute_mb` seconds per micro-batch; the
    links each crosses go into `used`. Rises with n and falls with compute_mb (the collectives'
    bytes grow with the rank's parameters, and the compute hides them), which the search's
    floors rely on (apsi.training.frameworks.timing.tail_floor)."""
    tp, pp, cp, ep, etp, dp = x.tp, x.pp, x.cp, x.ep, x.etp, x.dp
    pair = links(gpu)
    layers = a.layers + a.mtp_layers
    # PP: the fill and the drain each cross p - 1 boundaries with one s b h / (c t) message; the
    # steady state overlaps them (MB-GUIDE; MLM-SCHED).
    pp_time = 0.0
    if pp > 1:
        message = 2 * x.seq * x.micro_batch / (cp * (tp if x.sequence_parallel else 1)) * a.width
        hop, link = send(gpu, tp * cp * dp, message, pair)
        if used is not None:
            used["pp"] = link
        pp_time = 2 * (pp - 1) * hop

    # DP: the rank's parameters (its layers' share of the dense ones over tp, of the experts over
    # ep x etp) reduced over dp x cp (experts over their expert-data-parallel group).
    share = n / layers
    dense = dense_params * share / tp
    experts = expert_params * share / (ep * etp)
    ddp = dp * cp
    edp = max(1, tp * cp * dp // (ep * etp))
    rs_d, ag_d, link = _dp_part(gpu.scaleup_domain, pair, traffic, dense, ddp, tp, n)
    rs_e, ag_e, link_e = _dp_part(gpu.scaleup_domain, pair, traffic, experts, edp, ep * etp, n)
    if used is not None and (link or link_e):
        used["dp"] = link_e or link
    rs, ag = rs_d + rs_e, ag_d + ag_e
    dp_time = exposed_dp(traffic, rs, ag, compute_mb, n, x.micro_batches, x.vpp, min(pp, x.micro_batches))
    # The optimizer updates the rank's shard of the states, over its data-parallel group; unsharded
    # where the gradients are all-reduced (DeepSpeed's ZeRO-0, DDP: every rank steps all of its
    # replica's parameters, as its memory holds all their states).
    state_share = dense + experts if traffic.all_reduce else dense / ddp + experts / edp
    optimizer = state_share * OPTIMIZER_BYTES_PER_PARAM / hbm
    return pp_time, dp_time, optimizer


def tail_least(a: Architecture, gpu: GPU, x: Shape, dense_params: float, expert_params: float, traffic: DpTraffic,
               n: int, compute_mb: float, dp: int) -> float:
    """A lower bound on the sum of tail() at every dp from `dp` on (x's own dp and micro-batches are
    not read), for the search's floors (apsi.training.frameworks.bounds). The PP fill and drain at the
    faster of the two links a hop may cross; the optimizer at none; the exposed DP traffic of a
    group whose ranks are at least an NVLink domain apart at its size at `dp`: such a group has one
    rank in each domain (collectives.collective), so its time rises with its size (the ring's
    (size - 1) / size twice over) and the exposure with it (exposed_dp). A group whose ranks may
    share a domain, or of one rank at `dp`, is counted at none (a hierarchical time is not
    monotone in its size), as is traffic per micro-batch (FSDP2, ZeRO-3: the micro-batches fall
    as dp grows)."""
    tp, pp, cp, ep, etp = x.tp, x.pp, x.cp, x.ep, x.etp
    domain = gpu.scaleup_domain
    pair = links(gpu)
    layers = a.layers + a.mtp_layers
    least = 0.0
    if pp > 1:
        message = 2 * x.seq * x.micro_batch / (cp * (tp if x.sequence_parallel else 1)) * a.width
        least += 2 * (pp - 1) * min(link.latency + message / link.bandwidth for link in pair)
    if traffic.per_micro_batch:
        return least
    share = n / layers
    rs = ag = 0.0
    if traffic.bucket_per_rank:
        # A bucket that grows with the group makes a larger group's bucket faster: bound it by one
        # bucket of all the rank's parameters (the fastest rate, one latency), which no dp beats.
        traffic = traffic._replace(bucket_elements=math.inf, bucket_per_rank=0.0)
    if tp >= domain and dense_params > 0 and dp * cp >= 2:
        rs, ag, _ = _dp_part(domain, pair, traffic, dense_params * share / tp, dp * cp, tp, n)
    edp = tp * cp * dp // (ep * etp)
    if ep * etp >= domain and expert_params > 0 and edp >= 2:
        rs_e, ag_e, _ = _dp_part(domain, pair, traffic, expert_params * share / (ep * etp), edp, ep * etp, n)
        rs, ag = rs + rs_e, ag + ag_e
    return least + exposed_dp(traffic, rs, ag, compute_mb, n, 1, x.vpp, pp)


def exposed_dp(traffic: DpTraffic, rs: float, ag: float, compute_mb: float, n: int, micro_batches: int,
               vpp: int = 1, group: int = 1) -> float:
    """Seconds of the data-parallel reduction `rs` and gather `ag` (each over the step's share of
    it: both passes of a per-micro-batch gather) that the framework's overlap leaves exposed, the
    micro-batch's compute `compute_mb` taken as a third forward and two thirds backward (UPB: the
    backward costs twice the forward). Rises with rs and ag, falls with compute_mb.

    - Per micro-batch (FSDP2 and ZeRO-3, DpTraffic.per_micro_batch): each layer's gather is
      prefetched under the layer before it (FSDP2's implicit one-unit prefetch, FSDP2 docstring;
      DeepSpeed's stage3_prefetch_bucket_size, DS config-json.md), the forward's half under the
      forward and the backward's half with the reduce-scatters under the backward; the first
      layer's gather has nothing before it and the last layer's reduction nothing after it, so at
      least those two are exposed (modelling.md 5.5, 5.6 item 4; ZeRO-3's 3x the parameter volume
      of ZeRO-1/2's 2x, UPB "ZeRO-3", Rajbhandari et al. 2020 Sec. 7).
    - Once per step: the reduction under the last micro-batch's backward and the gather under the
      first's forward where the framework overlaps them (reduce_hidden, gather_hidden; MLM-ARGS,
      MB-GUIDE "Communication Overlaps"), else whole; ZeRO-2 reduces every micro-batch under its
      own backward (reduce_per_micro_batch). Under the interleaved schedule (`vpp` model chunks per
      rank, micro-batches in groups of `group`: the pipeline's size, MLM-SCHED, or the replica's
      micro-batches where fewer, as torchtitan allows; pp there hid more than a recomputation adds)
      each chunk is reduced when its last backward ends, which for chunk c is c groups of chunk
      backwards before the rank's last, and gathered before its first forward, c groups into the
      step: the later chunks' traffic hides under the earlier chunks' compute ("VPP gives more
      overlap", MB-GUIDE; Megatron buckets the first chunk only, "communication for these model
      chunks is overlapped with compute anyway", MLM training.py get_model); one link (_chunked)."""
    layers = max(1, n)
    if traffic.per_micro_batch:
        forward = max(ag / 2 / layers, ag / 2 - compute_mb / 3)
        backward = max(rs / layers, ag / 2 + rs - compute_mb * 2 / 3)
        return micro_batches * (forward + backward)
    reduce = _chunked(rs, compute_mb * 2 / 3, vpp, group) if traffic.reduce_hidden else rs
    if traffic.reduce_per_micro_batch:
        reduce *= micro_batches
    return reduce + (_chunked(ag, compute_mb / 3, vpp, group) if traffic.gather_hidden else ag)


def _chunked(total: float, window: float, vpp: int, group: int) -> float:
    """Exposed seconds of `total` link time split evenly over `vpp` chunks, chunk 0's under its own
    chunk's share of `window` (one micro-batch's backward, or forward, on the rank) and chunk c's
    from c x `group` such shares before the rank's compute ends (or after it starts), the link
    taking them in turn: max over c of (c + 1) total / v - max(1, c group) window / v. At vpp 1 it is
    max(0, total - window), the last micro-batch's overlap."""
    per, share = total / vpp, window / vpp
    most = per - share  # chunk 0; a loop, not a generator (the search's floors ask it by the million)
    for c in range(1, vpp):
        most = max(most, (c + 1) * per - max(1, c * group) * share)
    return max(0.0, most)
