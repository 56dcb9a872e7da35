"""Kubernetes resource quantities ('4000m', '64Gi') as numbers, to compare them by value."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

_SUFFIXES = {
    "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
    "n": Decimal("1e-9"), "u": Decimal("1e-6"), "m": Decimal("1e-3"),
    "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
}  # fmt: skip


def parse(value: Any) -> Decimal | None:
    """A resource.Quantity as a number ('4000m' -> 4, '1Gi' -> 1073741824), None if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return Decimal(str(value))
    if not isinstance(value, str) or not value:
        return None
    for suffix in sorted(_SUFFIXES, key=len, reverse=True):
        if value.endswith(suffix):
            number, factor = value[: -len(suffix)], Decimal(_SUFFIXES[suffix])
            break
    else:
        number, factor = value, Decimal(1)
    try:
        return Decimal(number) * factor
    except InvalidOperation:
        return None


def format_bytes(value: Decimal) -> str:
    """A byte count as a quantity, in Gi where it is whole Gi (so it reads like the sizes it sums)."""
    whole = int(value)
    return f"{whole // 2**30}Gi" if whole % 2**30 == 0 else str(whole)
