"""Chakra node types (the schema's ``NodeType``), defined once: plain ints, for numpy and Arrow.

    from chakra_core.format.nodetypes import COMP, COLL, COMM_NODE_TYPES

``NODE_TYPES`` maps every number to its schema name (``7 -> "COMM_COLL_NODE"``) and
``NODE_TYPE_VALUES`` the reverse.
"""

from __future__ import annotations

from chakra_core.format.schema import et_def_pb2 as pb

INVALID: int = pb.INVALID_NODE  # 0
METADATA: int = pb.METADATA_NODE  # 1
MEM_LOAD: int = pb.MEM_LOAD_NODE  # 2
MEM_STORE: int = pb.MEM_STORE_NODE  # 3
COMP: int = pb.COMP_NODE  # 4
SEND: int = pb.COMM_SEND_NODE  # 5
RECV: int = pb.COMM_RECV_NODE  # 6
COLL: int = pb.COMM_COLL_NODE  # 7

COMM_NODE_TYPES: tuple[int, ...] = (SEND, RECV, COLL)
MEM_NODE_TYPES: tuple[int, ...] = (MEM_LOAD, MEM_STORE)

NODE_TYPES: dict[int, str] = {v.number: v.name for v in pb.NodeType.DESCRIPTOR.values}
NODE_TYPE_VALUES: dict[str, int] = {name: number for number, name in NODE_TYPES.items()}

#: Name prefix of the CPU node a converted blocking gloo call keeps its own duration on (the
#: call's gloo op: gloo:all_reduce, gloo:recv, ...; docs/ingestion.md, 'Time of communication
#: calls'). A replay runs the call for real and a network fitted to the runtime times it, so
#: both take such a node as no time.
CALL_OWN_TIME_PREFIX: str = "gloo:"
#: The same for a synchronous XLA collective of a converted JAX profile (convert/jax/emit.py):
#: the time from its last peer's arrival to its end on this device.
XLA_CALL_OWN_TIME_PREFIX: str = "xla call:"
CALL_OWN_TIME_PREFIXES: tuple[str, ...] = (CALL_OWN_TIME_PREFIX, XLA_CALL_OWN_TIME_PREFIX)
#: Host nodes of a converted JAX profile that stand for the host's time around the device's work
#: rather than for operators (convert/jax/emit.py): the device's idle before an op, waiting for its
#: launch (`launch <op>`, where it lasts 1 µs or more), and the host's time after a step's last op
#: (`host after step N`). Which of them a step holds depends on timing, so a comparison of the
#: steps' operators leaves them out (analysis/step_work.py).
LAUNCH_GAP_PREFIX: str = "launch "
AFTER_STEP_PREFIX: str = "host after step "
HOST_GAP_PREFIXES: tuple[str, ...] = (LAUNCH_GAP_PREFIX, AFTER_STEP_PREFIX)
