"""The names a generated file uses for itself, so that no spec name can shadow one.

A spec's names reach the generated file in four places, each with its own rule:

- input names are parameters of ``Model.forward()`` and ``generate()`` (and ``NAME_mask``
  with them): they are the model's API, so a clash is refused (``forward_names``);
- ``let`` names and fixed axis lengths are ``Config`` fields: refused where they would hide
  one of Config's own names, ``tiny`` among them (``config_names``);
- free axis names are locals of ``example_inputs()``: refused where they would hide one of
  its own (``example_names``);
- statement names become locals and submodule attributes, which the code generator renames
  (``x_2``) instead: locals avoid ``forward_names``, attributes ``module_attrs``.

The sets are read off the code templates (``templates/codegen``: every top-level ``def``,
``class`` and ``import``, the methods the generated classes define, the names bound in
``generate()`` and ``example_inputs()``, the builtins the code calls). What is read off the
templates is stored in reserved_names.py (reading them took a tenth of a cold ``table``):
``python -m taxcompile.reserved`` writes it again, and tests/test_reserved_store.py fails
until it equals what the templates give. What the code generator writes inline (forward()'s own
locals, example_inputs()'s lines) is listed next to the code that writes it;
tests/test_reserved_names.py parses every generated file and fails when a function binds a
name the file defines at the top level, or a list here misses one. Front end: no torch.
"""

from __future__ import annotations

import builtins
import keyword
import re
from functools import lru_cache
from pathlib import Path

TEMPLATES = Path(__file__).parent / "templates" / "codegen"

# forward()'s own names besides the helpers it calls: its options and what the code
# generator writes inline (codegen/model.py, planner.py, repeat.py, decoder.py, recurrence.py,
# generate.py).
FORWARD_LOCALS = frozenset({
    "self", "return_attention", "validate", "cache", "cfg", "B", "at", "layer", "attn",
    "log_probs", "penalties", "capsules", "features"})
# Names the code generator gives its own temporaries through the same fresh-name registry
# as the statements' locals (an input may take one: the temporary becomes `out_2`).
TEMPORARIES = frozenset({"t", "out", "penalty", "state", "ctx", "g", "outputs", "past"})
# example_inputs()'s lines (codegen/model.py examples(), mask_example(), gold_off_padding())
# bind these in the same function as the free axes' lengths; `L` is rebound only after
# the last use of an axis, so an axis may be called `L`.
EXAMPLE_LINE_LOCALS = frozenset({"out", "keep", "E", "dst", "src", "gold"})
# Config fields the code generator adds beside the spec's constants and axes
# (codegen/config.py: the rows of a learned position table).
CONFIG_FIELDS = frozenset({"max_len"})
# nn.Module's attributes (torch 2.13, public and private): a submodule attribute of that
# name would hide the method (`self.compile = …` and model.compile() breaks).
# tests/test_reserved_names.py compares the list with dir(torch.nn.Module).
NN_MODULE_ATTRS = frozenset({
    "T_destination", "_apply", "_backward_hooks", "_backward_pre_hooks", "_buffers",
    "_call_impl", "_compiled_call_impl", "_forward_hooks", "_forward_hooks_always_called",
    "_forward_hooks_with_kwargs", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_get_backward_hooks", "_get_backward_pre_hooks", "_get_name", "_is_full_backward_hook",
    "_load_from_state_dict", "_load_state_dict_post_hooks", "_load_state_dict_pre_hooks",
    "_maybe_warn_non_full_backward_hook", "_modules", "_named_members",
    "_non_persistent_buffers_set", "_parameters", "_register_load_state_dict_pre_hook",
    "_register_state_dict_hook", "_replicate_for_data_parallel", "_save_to_state_dict",
    "_slow_forward", "_state_dict_hooks", "_state_dict_pre_hooks", "_version",
    "_wrapped_call_impl", "add_module", "apply", "bfloat16", "buffers", "call_super_init",
    "children", "compile", "cpu", "cuda", "double", "dump_patches", "eval", "extra_repr",
    "float", "forward", "get_buffer", "get_extra_state", "get_parameter", "get_submodule",
    "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers", "named_children",
    "named_modules", "named_parameters", "parameters", "register_backward_hook",
    "register_buffer", "register_forward_hook", "register_forward_pre_hook",
    "register_full_backward_hook", "register_full_backward_pre_hook",
    "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "register_module", "register_parameter", "register_state_dict_post_hook",
    "register_state_dict_pre_hook", "requires_grad_", "set_extra_state", "set_submodule",
    "share_memory", "state_dict", "to", "to_empty", "train", "training", "type", "xpu",
    "zero_grad"})


def _code(path: Path) -> str:
    """A template as Python text: Jinja statements dropped, expressions made one name."""
    text = path.read_text(encoding="utf-8")
    text = re.sub(r"\{#.*?#\}|\{%.*?%\}", "", text, flags=re.S)
    return re.sub(r"\{\{.*?\}\}", "_j", text, flags=re.S)


# strings (triple-quoted first) and comments: what is left is code
_NOT_CODE = re.compile(r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"(?:\\.|[^"\\\n])*"'
                       r"|'(?:\\.|[^'\\\n])*'|#[^\n]*")


def _code_names(text: str) -> set[str]:
    """The identifiers of some Python text outside its strings and comments (a regex, not
    the tokenizer: this runs on every `check`)."""
    return set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", _NOT_CODE.sub(" ", text)))


@lru_cache(maxsize=None)
def _templates() -> tuple[tuple[str, str], ...]:
    return tuple((p.relative_to(TEMPLATES).as_posix(), _code(p))
                 for p in sorted(TEMPLATES.rglob("*.j2")))


_TOP = re.compile(r"^(?:def|class)\s+([A-Za-z_]\w*)|^import\s+([\w.]+)(?:\s+as\s+(\w+))?"
                  r"|^from\s+\S+\s+import\s+(.+)", re.M)


def _module_names() -> frozenset[str]:
    """Every name a generated file defines at its top level: the templates' unindented
    ``def``/``class`` and ``import``/``from … import`` names, and the file's fixed classes."""
    names = {"Config", "Output", "Model", "example_inputs", "annotations"}
    text = "\n".join(line for _, t in _templates() for line in t.split("\n")
                     if line.startswith(("def ", "class ", "import ", "from ")))
    for d, imp, alias, frm in _TOP.findall(text):
        if d:
            names.add(d)
        elif imp:
            names.add(alias or imp.split(".")[0])
        else:
            names.update(n.split(" as ")[-1].strip() for n in frm.split(","))
    return frozenset(n for n in names if n.isidentifier() and not n.startswith("_j"))


def _builtins_used() -> frozenset[str]:
    """The builtins the templates' code calls or names (strings and comments left out)."""
    known = set(dir(builtins)) - set(keyword.kwlist)
    return frozenset(_code_names("\n".join(t for _, t in _templates())) & known)


def _function(template: str, name: str) -> str:
    """The text of function ``name`` of a template: from its ``def`` to the next line
    indented no deeper."""
    text = dict(_templates())[template]
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"\s*def {name}\(", line))
    indent = len(lines[start]) - len(lines[start].lstrip())
    end = next((j for j in range(start + 1, len(lines)) if lines[j].strip()
                and len(lines[j]) - len(lines[j].lstrip()) <= indent
                and not lines[j].lstrip().startswith((")", "\"\"\""))), len(lines))
    return "\n".join(lines[start:end])


def _bound(text: str) -> set[str]:
    """Names a function's text binds: parameters, assignment and ``for`` targets, nested
    ``def``s (comprehensions have their own scope; an over-approximation only reserves
    more)."""
    text = _NOT_CODE.sub(" ", text)
    names = set(re.findall(r"def\s+(\w+)", text))
    lines, outer, nested = text.splitlines(), [], None
    for line in lines[1:]:  # a nested function's body is its own scope: only its name counts
        depth = len(line) - len(line.lstrip())
        if nested is not None and (depth > nested or not line.strip()):
            continue
        nested = depth if line.lstrip().startswith("def ") else None
        outer.append(line if nested is None else line[:line.index("(")])  # not its params
    text = "\n".join(lines[:1] + outer)
    names |= set(re.findall(r"[(,*]\s*(\w+)\s*[:=,)]", text))  # parameters, keywords
    for m in re.finditer(r"^\s*([\w, ]+?)\s*(?::[^=\n]+)?=(?!=)", text, flags=re.M):
        names.update(n.strip() for n in m.group(1).split(","))
    names |= {n for m in re.finditer(r"^\s*for\s+([\w, ]+?)\s+in\b.*:$", text, flags=re.M)
              for n in m.group(1).split(",")}
    return {n.strip() for n in names if n.strip().isidentifier()
            and not n.strip().startswith("_j") and not keyword.iskeyword(n.strip())}


def _class_methods() -> frozenset[str]:
    """The methods of the classes that hold a spec's names: Model, its blocks and Config
    (``forward``, ``generate``, ``capsule_loss``, ``loss``, ``decode``, ``tiny``)."""
    texts = dict(_templates())
    return frozenset(m.group(1) for t in ("model.py.j2", "generate.py.j2", "loss.py.j2",
                                          "crf_loss.py.j2")
                     for m in re.finditer(r"^    def\s+(\w+)", texts[t], flags=re.M)
                     if not m.group(1).startswith("_j"))


def _config_body_names() -> frozenset[str]:
    """Config's own attributes (its methods: ``tiny``, ``__post_init__``) and the names its
    class body reads once the fields are bound (the decorators ``property``,
    ``classmethod``): the statements at the class body's level. What its methods bind or
    read (``__post_init__``'s loop variables, ``ValueError``) is their own scope or the
    module's, which a field cannot hide; annotations are not evaluated (``from __future__
    import annotations``)."""
    text = dict(_templates())["model.py.j2"]
    body = text[text.index("class Config"):text.index("class Output")]
    names: set[str] = set()
    for line in _NOT_CODE.sub(" ", body).splitlines()[1:]:
        if not line.startswith("    ") or line.startswith("     "):
            continue  # a method's body, or what follows the class
        method = re.match(r"\s*def\s+(\w+)", line)
        names |= {method.group(1)} if method else _code_names(line)
    return frozenset(n for n in names if not n.startswith("_j")) - set(keyword.kwlist)


def _example_inputs_names() -> frozenset[str]:
    """The names example_inputs() binds or reads."""
    text = _function("model.py.j2", "example_inputs")
    return frozenset((_code_names(text) | _bound(text)) - {"_j"} - set(keyword.kwlist))


def derive() -> dict[str, frozenset[str]]:
    """What the templates give, read now: reserved_names.py must hold the same."""
    return {"module_names": _module_names(), "builtins_used": _builtins_used(),
            "generate_bound": frozenset(_bound(_function("generate.py.j2", "generate"))),
            "class_methods": _class_methods(), "config_body": _config_body_names(),
            "example_inputs": _example_inputs_names()}


def _stored(name: str) -> frozenset[str]:
    from .reserved_names import NAMES

    return NAMES[name]


def write_store(path: Path = Path(__file__).with_name("reserved_names.py")) -> None:
    """Write reserved_names.py from the templates (``python -m taxcompile.reserved``)."""
    import textwrap

    lines = ['"""@generated by `python -m taxcompile.reserved` from taxcompile/templates/codegen:',
             "the names the generated file uses for itself, read off its templates (reserved.py",
             'reads them here; tests/test_reserved_store.py checks them against the templates)."""',
             "", "NAMES = {"]
    for key, names in derive().items():
        body = ", ".join(f'"{n}"' for n in sorted(names))
        lines.append(f'    "{key}": frozenset({{')
        lines += textwrap.wrap(body, 91, initial_indent=" " * 8, subsequent_indent=" " * 8,
                               break_on_hyphens=False)
        lines.append("    }),")
    lines.append("}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


@lru_cache(maxsize=None)
def module_names() -> frozenset[str]:
    """Every name a generated file defines at its top level: the templates' unindented
    ``def``/``class`` and ``import``/``from … import`` names, and the file's fixed classes."""
    return _stored("module_names")


@lru_cache(maxsize=None)
def builtins_used() -> frozenset[str]:
    """The builtins the templates' code calls or names (strings and comments left out)."""
    return _stored("builtins_used")


@lru_cache(maxsize=None)
def class_methods() -> frozenset[str]:
    """The methods of the classes that hold a spec's names: Model, its blocks and Config
    (``forward``, ``generate``, ``capsule_loss``, ``tiny``)."""
    return _stored("class_methods")


@lru_cache(maxsize=None)
def forward_names() -> frozenset[str]:
    """What an input (a parameter of forward() and generate()) or a local of forward() may
    not be called: the file's top-level names, the builtins its code uses, forward()'s own
    names and generate()'s parameters and locals."""
    return module_names() | builtins_used() | FORWARD_LOCALS | _stored("generate_bound")


@lru_cache(maxsize=None)
def module_attrs() -> frozenset[str]:
    """What a submodule attribute of a generated class may not be called."""
    return NN_MODULE_ATTRS | class_methods() | {"cfg", "self"}


@lru_cache(maxsize=None)
def config_names() -> frozenset[str]:
    """What a Config field (a ``let``, a fixed axis) may not be called: Config's methods, the
    names its class body reads (``classmethod``, ``property``) and the fields the code
    generator adds. A field is an attribute of Config alone (the code reads ``cfg.NAME``),
    so the other classes' methods and the names of Config's methods' scopes are free."""
    return _stored("config_body") | CONFIG_FIELDS


@lru_cache(maxsize=None)
def example_names() -> frozenset[str]:
    """What a free axis (a local of example_inputs()) may not be called."""
    return _stored("example_inputs") | (EXAMPLE_LINE_LOCALS - set(keyword.kwlist))


ROLES = {  # spec name kind -> (the names it may not take, who in the generated file has them)
    "input": (forward_names, "the generated `forward()` and `generate()` already use"),
    "constant": (config_names, "the generated `Config` class already uses"),
    "axis": (lambda: example_names() | config_names(),
             "the generated `example_inputs()` and `Config` already use"),
}


def refusal(name: str, role: str) -> tuple[str, str] | None:
    """(message, hint) when a spec's ``role`` (input, constant, axis) may not be called
    ``name``; an input's padding mask ``NAME_mask`` counts too."""
    names, where = ROLES[role]
    clash = name if name in names() else f"{name}_mask" \
        if role == "input" and f"{name}_mask" in names() else None
    if clash is None:
        return None
    kind = ("a helper, class or module of the file" if clash in module_names() else
            "a Python builtin" if clash in builtins_used() else "a name of its own")
    via = f" (the input's padding mask `{clash}` is a parameter too)" if clash != name else ""
    return (f"{role} name `{name}` is reserved: {where} `{clash}`, {kind}{via}",
            f"pick another name, e.g. `{name}2`")


if __name__ == "__main__":
    write_store()
