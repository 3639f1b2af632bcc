"""The extender's answers, pure: (snapshot, ExtenderArgs, the pod's memory request) -> bytes.

Filter drops a node when its CPU is predicted hot (precomputed in the snapshot) or when its
predicted memory use plus the pod's memory request exceeds ``memory_threshold`` of its
allocatable memory; if that would drop every candidate, none is dropped. This is
``forecaster.nodes.split_hot`` (the reference; a test holds the two to identical answers)
made fast: a request below every node's room skips the memory check, and memory messages are
assembled from per-node pieces precomputed in the snapshot.

Prioritize answers each node's ``score_for_pod``: the snapshot's pre-serialized fragment
where the request is within the node's slack, the memory score for this request elsewhere.
"""

from __future__ import annotations

import json

from adapter.scheduler.protocol import ExtenderArgs, filter_result, filter_result_names
from adapter.scheduler.snapshot import SCORE_TAIL, PlacementSnapshot, host_fragment
from forecaster.nodes import NEUTRAL_SCORE, memory_score
from forecaster.nodes.scoring import request_text


def _memory_failures(snap: PlacementSnapshot, names: list[str], request_bytes: float) -> dict[str, str]:
    """node -> its full filter message, for the nodes the request does not fit on."""
    view = snap.memory.get
    short = [n for n in names if (v := view(n)) is not None and request_bytes > v.room]
    size = request_text(request_bytes)
    out: dict[str, str] = {}
    for n in short:
        v = snap.memory[n]
        msg = v.message_head + size + v.message_tail
        out[n] = snap.hot[n] + "; " + msg if n in snap.hot else msg
    return out


def filter_answer(snap: PlacementSnapshot, args: ExtenderArgs, request_bytes: float) -> bytes:
    names = args.node_names
    hot = snap.hot
    memory = _memory_failures(snap, names, request_bytes) if request_bytes > snap.min_mem_room else {}
    if memory:
        failed = [n for n in names if n in hot or n in memory]
        failed_json = dict(snap.hot_json) if len(memory) < len(failed) else {}
        for n, msg in memory.items():
            failed_json[n] = (snap.name_json.get(n) or json.dumps(n).encode()) + b":" + json.dumps(msg).encode()
    else:
        failed = [n for n in names if n in hot]
        failed_json = snap.hot_json
    passed = [n for n in names if n not in hot and n not in memory] if failed else names
    if not passed:  # every candidate fails: drop none (same rule as split_hot)
        passed, failed = names, []
    if args.cache_capable:
        return filter_result_names(passed, failed, snap.name_json, failed_json)
    return filter_result(args, passed, {n: memory.get(n) or hot[n] for n in failed})


def prioritize_answer(snap: PlacementSnapshot | None, names: list[str], request_bytes: float) -> bytes:
    frags = snap.fragments if snap is not None else {}
    get = frags.get
    if snap is None or request_bytes <= snap.min_mem_slack:  # every precomputed score holds
        return b"[" + b",".join([get(n) or host_fragment(n, NEUTRAL_SCORE) for n in names]) + b"]"
    view = snap.memory.get
    parts = []
    for n in names:
        v = view(n)
        if v is None or request_bytes <= v.slack:
            parts.append(get(n) or host_fragment(n, NEUTRAL_SCORE))
        else:  # score_for_pod, from the precomputed view
            parts.append(v.fragment_head + SCORE_TAIL[min(v.cpu_score, memory_score(v.load, request_bytes, v.allocatable))])
    return b"[" + b",".join(parts) + b"]"
