"""Argument checks shared by the cost models of §3–§8 (stdlib only, so ``attnlab.cost`` imports without
torch).

Every failure raises ``ValueError``/``TypeError`` naming the argument and the value it got.
"""

from __future__ import annotations

import numbers

# bytes per element of the dtypes the cost models know
DTYPE_BYTES = {"fp16": 2, "float16": 2, "bf16": 2, "bfloat16": 2, "fp32": 4, "float32": 4}


def pos_int(value, name: str) -> int:
    """``value`` as an int >= 1 (numpy integers accepted); bools, floats and the rest are refused."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a positive integer, got {value!r} ({type(value).__name__})")
    if value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def nonneg_int(value, name: str) -> int:
    """``value`` as an int >= 0 (numpy integers accepted): a length that may be empty."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be a non-negative integer, got {value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")
    return int(value)


def flag(value, name: str) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return value


def dtype_bytes(value, name: str = "dtype_bytes") -> int:
    """Bytes per element from an int (1, 2, 4, 8) or a dtype name ('fp16', 'bf16', 'fp32')."""
    if isinstance(value, str):
        key = value.lower()
        if key not in DTYPE_BYTES:
            raise ValueError(f"{name} must be one of {sorted(set(DTYPE_BYTES))}, got {value!r}")
        return DTYPE_BYTES[key]
    n = pos_int(value, name)
    if n not in (1, 2, 4, 8):
        raise ValueError(f"{name} must be 1, 2, 4 or 8 bytes per element, got {value!r}")
    return n


def heads_pair(heads, kv_heads) -> tuple[int, int]:
    """(H, Hkv) with H % Hkv == 0; ``kv_heads=None`` means Hkv = H (multi-head attention)."""
    H = pos_int(heads, "heads")
    Hkv = H if kv_heads is None else pos_int(kv_heads, "kv_heads")
    if H % Hkv:
        raise ValueError(f"heads ({H}) must be a multiple of kv_heads ({Hkv})")
    return H, Hkv
