"""A captured graph seen through one vocabulary: every node's operator under a canonical name
(ATen overloads, torch functions and tensor methods alike), so the recognisers match
`bmm`/`matmul`/`einsum`, `_softmax`/`softmax` and `masked_fill`/`where` the same way."""
from __future__ import annotations

import operator

CANON = {
    "_softmax": "softmax", "softmax": "softmax", "_log_softmax": "log_softmax",
    "log_softmax": "log_softmax", "sigmoid": "sigmoid",
    "bmm": "matmul", "mm": "matmul", "matmul": "matmul", "einsum": "matmul", "baddbmm": "matmul",
    "addmm": "linear", "linear": "linear",
    "div": "div", "truediv": "div", "mul": "mul", "add": "add", "sub": "sub",
    "masked_fill": "where", "where": "where",
    "_unsafe_view": "view", "reshape": "view", "view": "view", "flatten": "view",
    "unflatten": "view",
    "scaled_dot_product_attention": "sdpa",
    "_scaled_dot_product_flash_attention_for_cpu": "sdpa",
    "_scaled_dot_product_efficient_attention": "sdpa",
}
# Ops that move or copy a tensor without computing anything the taxonomy reads.
TRANSPARENT = {"view", "clone", "expand", "permute", "transpose", "t", "unsqueeze", "squeeze",
               "contiguous", "alias", "_to_copy", "to", "detach", "getitem", "dropout",
               "native_dropout", "lift_fresh_copy", "type_as", "float", "slice",
               "split", "split_with_sizes", "chunk", "unbind", "select"}
NORM_OPS = {"linalg_vector_norm", "norm", "rsqrt", "sqrt", "normalize"}


def op(node) -> str:
    """The canonical name of a node's operator ('' for placeholders and outputs)."""
    if node.op == "call_method":
        name = node.target
    elif node.op == "call_function":
        t = node.target
        if t is operator.getitem:
            return "getitem"
        name = getattr(t, "__name__", str(t))
        if hasattr(t, "_opname"):  # an ATen OpOverload: aten.bmm.default -> bmm
            name = t._opname
        name = name.split(".")[0]
    elif node.op == "call_module":
        name = type(node.graph.owning_module.get_submodule(node.target)).__name__.lower()
    else:
        return ""
    name = name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
    return CANON.get(name, name)


def shape(node):
    v = node.meta.get("val") if hasattr(node, "meta") else None
    return tuple(v.shape) if v is not None and hasattr(v, "shape") else None


def is_bool(node) -> bool:
    v = node.meta.get("val")
    return v is not None and getattr(v, "dtype", None) is not None and str(v.dtype) == "torch.bool"


def tensor_args(node) -> list:
    """The node's tensor arguments, lists (cat, stack) flattened."""
    out = []
    for a in node.args:
        if isinstance(a, (list, tuple)):
            out.extend(x for x in a if hasattr(x, "op"))
        elif hasattr(a, "op"):
            out.append(a)
    return out


def source_line(node) -> str | None:
    """`file:line: code` of the innermost user frame of the node's stack trace."""
    st = node.meta.get("stack_trace")
    if not st:
        return None
    lines = st.strip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        s = lines[i].strip()
        if s.startswith("File ") and "/torch/" not in s:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            where = s.split('"')[1].rsplit("/", 1)[-1] if '"' in s else s
            num = s.split("line ")[1].split(",")[0] if "line " in s else "?"
            return f"{where}:{num}: {code}"
    return None


def strip(node, scales=None):
    """Follow a tensor back through moves and scalar scalings; collect the scalings."""
    while True:
        o, args = op(node), tensor_args(node)
        full = [a for a in args if not _empty(a)] if o == "cat" else []
        if o in TRANSPARENT and args:
            node = args[0]
        elif o == "cat" and len(full) == 1:
            node = full[0]  # new keys after an empty cache (Hugging Face's DynamicCache)
        elif o in ("mul", "div") and len(args) == 1:
            if scales is not None and not _unit(node):
                scales.append(node)
            node = args[0]
        else:
            return node


def _empty(node) -> bool:
    """Whether a tensor has no elements; a size known only at run time (an edge list's
    filtered length, torch.export's unbacked symbols) is not compared, as that would ask
    the tracer to guard on data."""
    return any(isinstance(d, int) and d == 0 for d in shape(node) or ())


def _unit(node) -> bool:
    """A scaling by 1 (SDPA's decomposition with scale=1.0) scales nothing."""
    return any(isinstance(a, (int, float)) and a == 1 for a in node.args)


def norms_reading(start, other, norms, through, depth: int = 64) -> list:
    """The nodes of ``norms`` (normalisation ops) other than ``other`` that read ``start``
    through ops of ``through`` alone, within ``depth`` steps (breadth first)."""
    seen, frontier, out = set(), [start], []
    for _ in range(depth):
        nxt = []
        for n in frontier:
            for u in n.users:
                if u in seen:
                    continue
                seen.add(u)
                if op(u) in norms and u is not other:
                    out.append(u)
                elif op(u) in through:
                    nxt.append(u)
        if not nxt:
            break
        frontier = nxt
    return out


def ancestors(node, depth: int):
    seen, frontier = [], [node]
    for _ in range(depth):
        frontier = [a for n in frontier for a in tensor_args(n) if a not in seen]
        seen.extend(frontier)
    return seen


def normalised(node) -> object | None:
    """A div whose divisor is a vector norm (cosine similarity's operands), if any."""
    n = strip(node)
    if op(n) in ("div", "mul") and len(tensor_args(n)) == 2:
        d = tensor_args(n)[1]
        for a in [d, *ancestors(d, 5)]:  # the norm itself, or clamped, expanded
            if op(a) in NORM_OPS:
                return n
    return None


def through_moves(node, test, depth: int = 12) -> bool:
    """Whether ``test`` holds for ``node`` or for a node it is, back through moves alone
    (TRANSPARENT ops, first operand), within ``depth`` steps."""
    for _ in range(depth):
        if test(node):
            return True
        args = tensor_args(node)
        if op(node) not in TRANSPARENT or not args:
            return False
        node = args[0]
    return False
