"""Attention inside a recurrence (``lstm(x, d, state = ATT)``; LSTMN, Cheng et al. 2016
eq. 4-7), planned inside the decoder loop of ``decoder.py``. Before the loop the RNN's
earlier states start empty; in step t the attention ATT runs first with the states
h_1 … h_(t-1) as its keys and values (h~_t = sum_i s_i^t h_i, eq. 6), its weights sum the
memory cells too (c~_t, eq. 6), the cell reads x_t with (h~_t, c~_t) as its previous state
(eq. 7), and h_t, c_t join the earlier states. At t = 1 there are none: every key is masked,
the weights are all zero (masked_softmax) and h~_1 = c~_1 = 0. The states are held at full
length T (zeros after t) so that every step's weights have one shape (return_attention)."""

from __future__ import annotations

from .expr import BATCH
from .frame import Var
from .plan import Stmt


def start(p, n, op, mask) -> None:
    """Before the loop: room for every step's state (B, T, hidden), zeros until the step
    that computes it; which positions come before each step and which one each step
    writes. ``mask``: the padding mask of the RNN's input (name, transform) or None."""
    st, f = p.step, p.frame
    st.own, st.past_mask = str(op.param("state")), mask
    want, T, hid, ax = p.want(n), f"{st.seq}.shape[{st.pos}]", st.hidden.shown(), st.axis
    st.past = f.locals.new(want + "_past")
    f.emit(f"{st.past} = {st.seq}.new_zeros({BATCH}, {T}, {st.hidden})",
           f"(B, {ax}, {hid}): h_i, written at step i (the attention sees i < t only)")
    if op.fn == "lstm":
        st.cells = f.locals.new(want + "_cells")
        f.emit(f"{st.cells} = {st.seq}.new_zeros({BATCH}, {T}, {st.hidden})",
               f"(B, {ax}, {hid}): c_i, their memory cells")
    st.before = f.locals.new(want + "_before")
    f.emit(f"{st.before} = torch.ones({T}, {T}, dtype=torch.bool, device={st.seq}.device)"
           ".tril(-1)", f"({ax}, {ax}): row t keeps the positions i < t")
    st.at = f.locals.new(want + "_at")
    f.emit(f"{st.at} = torch.eye({T}, dtype=torch.bool, device={st.seq}.device).unsqueeze(-1)",
           f"({ax}, {ax}, 1): row t picks position t")


def keys(p, node_id: str) -> None:
    """In step t, before the state attention: the RNN's name reads its states so far, the
    keys mask keeping the positions before t (none at t = 1: h~_1 = c~_1 = 0)."""
    st = p.step
    if st.own != node_id:
        return
    rnn = st.rnn
    keep = p.frame.locals.new(p.want(p.m.node(rnn)) + "_keep")
    code = f"{st.before}[t].expand({BATCH}, -1)"
    if st.past_mask is not None:  # and the padding, as everywhere
        name, then = st.past_mask
        code = f"{code} if {name} is None else {st.before}[t] & {name}{then}"
    p.frame.emit(f"{keep} = {code}", f"(B, {st.axis}): the states before step t")
    p.frame.vars[rnn] = Var(st.past, p.cm.shapes[rnn], None, st.hidden, (keep, ""))


def cells(p, node_id: str) -> None:
    """After the state attention: c~_t, its weights over the earlier memory cells (eq. 6)."""
    st = p.step
    if st.own != node_id or not st.cells:
        return
    a = next(w for _, w, _, nd in st.weights if nd.id == node_id)
    st.tilde = p.frame.locals.new(p.want(p.m.node(st.rnn)) + "_c_tilde")
    p.frame.emit(f"{st.tilde} = ({a}.reshape({BATCH}, 1, -1) @ {st.cells}).squeeze(1)",
                 f"(B, {st.hidden.shown()}): c~_t = sum_i s_i^t c_i (eq. 6)")


def previous(p) -> tuple[str, str, str]:
    """The cell's input x_t, its previous state [(h~_t, c~_t)] or [h~_t], and what it is."""
    st = p.step
    h = f"{p.frame.vars[st.own].name}.squeeze({st.pos})"
    state = f"[({h}, {st.tilde})]" if st.cells else f"[{h}]"
    name = p.m.node(st.own).name
    return f"{st.seq}.select({st.pos}, t)", state, f"x_t with `{name}`'s h~_t as h_(t-1)"


def project_keys(p, module: str) -> list[str]:
    """The state attention's ``wk=`` (an additive score's W2 h_i + b, ``project_keys``): of
    the zero states before the loop, then of h_t alone after each step (``remember``), not
    of all T states at every step. Returns the module's ``wk=`` argument."""
    st, f = p.step, p.frame
    name = f.locals.new(p.want(p.m.node(st.own)) + "_wk")
    f.body.insert(st.loop_at, Stmt(f"{name} = {module}.project_keys({st.past})",
                                   f"(B, H, {st.axis}, d_w): W2 h_i + b, updated as h_i is "
                                   "written", f.indent - 1))
    st.loop_at += 1
    st.past_wk = (name, module)
    return [f"wk={name}"]


def remember(p, node_id: str, state: str) -> None:
    """After the RNN's step: h_t (and c_t) written at position t of the states."""
    st = p.step
    if not st.own or node_id != st.rnn:
        return
    h = p.frame.vars[node_id].name
    f = p.frame
    f.emit(f"{st.past} = torch.where({st.at}[t], {h}, {st.past})", "h_t at position t")
    if st.past_wk:  # and its key term, W2 h_t + b
        wk, module = st.past_wk
        f.emit(f"{wk} = torch.where({st.at}[t], {module}.project_keys({h}), {wk})",
               "W2 h_t + b at position t")
    if st.cells:
        f.emit(f"{st.cells} = torch.where({st.at}[t], {state}[0][1].unsqueeze({st.pos}), "
               f"{st.cells})", "c_t at position t")
