"""Plain values across the sandbox boundary (stdlib only): the candidate's return values and the tests'
call arguments, one JSON line each.

Only values of exactly these types cross: ``None``, ``bool``, ``int``, ``float``, ``complex``, ``str``,
``bytes``, ``list``, ``tuple``, ``set``, ``frozenset``, ``dict`` (nested up to :data:`MAX_DEPTH`, at most
:data:`MAX_ITEMS` values in all). A subclass (a ``str`` whose ``__eq__`` is always true, an ``int``
with a custom ``__hash__``) or any other object is refused with ``TypeError``: what the tests compare
is always a plain value decoded in their own process, never an object the candidate made. Containers
travel tagged (``{"tuple": [...]}``), scalars as JSON scalars (NaN and infinities included), except an
``int`` of more than :data:`BIG_INT_BITS` bits, which travels as ``{"int": <hexadecimal>}``: JSON
writes integers in decimal, and Python refuses a decimal conversion of more than 4,300 digits
(``sys.set_int_max_str_digits``), which would turn an honest big answer into an error. A tagged
``int`` is a plain value like any other: the candidate decides nothing with it that it could not
with a JSON number.

This file is also run as source text inside the sandbox (prepended to ``harness.py`` and
``candidate.py``), so it imports nothing but the standard library.
"""

import json
import re

MAX_DEPTH = 64  # nesting levels
MAX_ITEMS = 1_000_000  # values in one message
BIG_INT_BITS = 4096  # an int longer than this (bits; about 1,233 decimal digits) travels in hexadecimal
_SEQUENCES = {list: "list", tuple: "tuple", set: "set", frozenset: "frozenset"}
_HEX_INT = re.compile(r"-?[0-9a-f]+")
_BUILDERS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset}


def encode_value(value):
    """``value`` as a JSON-ready tree (see the module docstring).

    Raises:
        TypeError: a value of another type (its type named), too deep or too many values.
    """
    count = [0]

    def enc(v, depth):
        count[0] += 1
        if count[0] > MAX_ITEMS or depth > MAX_DEPTH:
            raise TypeError(f"value too large to compare (over {MAX_ITEMS} values or {MAX_DEPTH} levels)")
        kind = type(v)
        if kind is int and v.bit_length() > BIG_INT_BITS:
            return {"int": format(v, "x")}  # a power-of-two base has no digit limit
        if v is None or kind in (bool, int, float, str):
            return v
        if kind is complex:
            return {"complex": [v.real, v.imag]}
        if kind is bytes:
            return {"bytes": v.hex()}
        if kind in _SEQUENCES:
            return {_SEQUENCES[kind]: [enc(x, depth + 1) for x in v]}
        if kind is dict:
            return {"dict": [[enc(k, depth + 1), enc(x, depth + 1)] for k, x in v.items()]}
        raise TypeError(f"a value of type {kind.__name__} cannot be compared (plain values only)")

    return enc(value, 0)


def decode_value(tree):
    """The value of a tree made by :func:`encode_value`.

    Raises:
        ValueError: a malformed tree.
    """
    kind = type(tree)
    if tree is None or kind in (bool, int, float, str):
        return tree
    if kind is not dict or len(tree) != 1:
        raise ValueError(f"malformed value: {str(tree)[:80]}")
    ((tag, body),) = tree.items()
    if tag in _BUILDERS and type(body) is list:
        return _BUILDERS[tag](decode_value(x) for x in body)
    if tag == "dict" and type(body) is list and all(type(p) is list and len(p) == 2 for p in body):
        return {decode_value(k): decode_value(v) for k, v in body}
    if tag == "bytes" and type(body) is str:
        return bytes.fromhex(body)
    if tag == "int" and type(body) is str and _HEX_INT.fullmatch(body):
        return int(body, 16)
    if tag == "complex" and type(body) is list and len(body) == 2 and all(type(x) in (int, float) for x in body):
        return complex(body[0], body[1])
    raise ValueError(f"malformed value: {str(tree)[:80]}")


def dumps_line(message):
    """One protocol message (a dict of JSON-ready values) as a UTF-8 line ending in ``\\n``."""
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()
