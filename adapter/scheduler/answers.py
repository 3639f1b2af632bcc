"""The extender's answers, pure: (snapshot, ExtenderArgs, the pod's memory request) -> bytes.

Filter drops a node when its CPU is predicted hot (precomputed in the snapshot) or when its
predicted memory use plus the pod's memory request exceeds ``memory_threshold`` of its
allocatable memory; if that would drop every candidate, none is dropped (the same rule as
``forecaster.nodes.split_hot``, which is the reference this must agree with).

Prioritize answers each node's ``score_for_pod``: the snapshot's pre-serialized fragment
where the request is within the node's slack, the exact per-pod score elsewhere.
"""

from __future__ import annotations

import json

from forecaster.nodes import NEUTRAL_SCORE, NodeScoreSettings, filter_reason, score_for_pod

from adapter.scheduler.protocol import ExtenderArgs, filter_result, filter_result_names
from adapter.scheduler.snapshot import PlacementSnapshot, host_fragment


def filter_answer(snap: PlacementSnapshot, args: ExtenderArgs, request_bytes: float, s: NodeScoreSettings) -> bytes:
    names = args.node_names
    hot = snap.hot
    if request_bytes <= snap.min_mem_room:  # no node can fail on memory: CPU-hot only
        failed = [n for n in names if n in hot]
        failed_json = snap.hot_json
        messages = hot
    else:
        room = snap.mem_room.get
        failed = [n for n in names if n in hot or ((r := room(n)) is not None and request_bytes > r)]
        messages = {n: filter_reason(snap.loads.get(n), s, request_bytes) or hot[n] for n in dict.fromkeys(failed)}
        failed_json = {n: snap.name_json.get(n, json.dumps(n).encode()) + b":" + json.dumps(m).encode() for n, m in messages.items()}
    passed = [n for n in names if n not in messages] if failed else names
    if not passed:  # every candidate fails: drop none (same rule as split_hot)
        passed, failed = names, []
    if args.cache_capable:
        return filter_result_names(passed, failed, snap.name_json, failed_json)
    return filter_result(args, passed, {n: messages[n] for n in failed})


def prioritize_answer(snap: PlacementSnapshot | None, names: list[str], request_bytes: float) -> bytes:
    frags = snap.fragments if snap is not None else {}
    get = frags.get
    if snap is None or request_bytes <= snap.min_mem_slack:  # every precomputed score holds
        return b"[" + b",".join([get(n) or host_fragment(n, NEUTRAL_SCORE) for n in names]) + b"]"
    slack = snap.mem_slack.get
    loads = snap.loads
    parts = []
    for n in names:
        sl = slack(n)
        if sl is None or request_bytes <= sl:
            parts.append(get(n) or host_fragment(n, NEUTRAL_SCORE))
        else:
            parts.append(host_fragment(n, score_for_pod(loads[n], request_bytes)))
    return b"[" + b",".join(parts) + b"]"
