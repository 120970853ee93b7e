"""rlxjax.ir — the RLX graph: rlxjax's own small SSA IR."""
from .types import DType, Dyn, TensorType, UnsupportedDTypeError, dtype_from_numpy
from .graph import Graph, Node, Params, Value, constant_value
from . import norm as _norm_ops  # noqa: F401  (registers the norm family)
from . import norm_grad as _norm_grad_ops  # noqa: F401  (registers the norm_grad family)
from . import pool as _pool_ops  # noqa: F401  (registers the pool family)
from . import conv as _conv_ops  # noqa: F401  (registers the conv family)
from . import indexing as _indexing_ops  # noqa: F401  (registers the indexing family)
from . import random as _random_ops  # noqa: F401  (registers the random family)
from . import control as _control_ops  # noqa: F401  (registers the region-carrying ops)
from . import special as _special_ops  # noqa: F401  (registers the special functions)
from . import linalg as _linalg_ops  # noqa: F401  (registers the linalg family)
from . import activation as _activation_ops  # noqa: F401  (softmax, gelu, silu and grads)
from . import attention as _attention_ops  # noqa: F401  (fused attention and its grad)
from . import bitwise as _bitwise_ops  # noqa: F401  (shifts, bit counts, reduce_precision)
from . import weight as _weight_ops  # noqa: F401  (frozen, possibly compressed weights)
from . import flexible as _flexible_ops  # noqa: F401  (dim_size: flexible shapes)
from .ops import OPS, IRTypeError, OpDef, broadcast_shapes, infer_types
from .verify import GraphVerificationError, verify
from .printer import format_graph

__all__ = [
    "DType", "Dyn", "TensorType", "UnsupportedDTypeError", "dtype_from_numpy",
    "Graph", "Node", "Params", "Value", "constant_value",
    "OPS", "IRTypeError", "OpDef", "broadcast_shapes", "infer_types",
    "GraphVerificationError", "verify", "format_graph",
]
