"""The tests' own definitions, independent of ropekv: FP8 codes by table, and
the unfused PyTorch computation (RoPE in float32 -> scale -> FP8 -> write).

Works on torch 1.13 (no float8 dtypes): FP8 codes are uint8 tensors.
"""

import math

import torch

# (exponent bits, mantissa bits, bias, largest finite code, NaN code written)
_FORMATS = {
    "e4m3fn": (4, 3, 7, 0x7E, 0x7F),
    "e5m2": (5, 2, 15, 0x7B, 0x7F),
}


def fp8_value(fmt: str, code: int) -> float:
    """The value of a non-negative, finite code (0 .. largest finite)."""
    e_bits, m_bits, bias, _, _ = _FORMATS[fmt]
    e, m = code >> m_bits, code & ((1 << m_bits) - 1)
    if e == 0:
        return math.ldexp(m / (1 << m_bits), 1 - bias)
    return math.ldexp(1 + m / (1 << m_bits), e - bias)


def _magnitudes(fmt: str) -> torch.Tensor:
    top = _FORMATS[fmt][3]
    return torch.tensor([fp8_value(fmt, c) for c in range(top + 1)], dtype=torch.float64)


def fp8_encode(fmt: str, x: torch.Tensor) -> torch.Tensor:
    """uint8 codes of float values: the nearest code (ties to the even code),
    saturating beyond the largest finite value (infinities too), NaN to the
    format's positive NaN code, the sign of zero kept."""
    mags = _magnitudes(fmt)
    nan_code = _FORMATS[fmt][4]
    x = x.to(torch.float64).flatten()
    a = x.abs().clamp(max=float(mags[-1]))
    a = torch.where(torch.isnan(a), torch.zeros_like(a), a)
    hi = torch.searchsorted(mags, a).clamp(max=len(mags) - 1)
    lo = (hi - 1).clamp(min=0)
    d_lo, d_hi = a - mags[lo], mags[hi] - a
    pick_hi = (d_hi < d_lo) | ((d_hi == d_lo) & (hi % 2 == 0))
    code = torch.where(pick_hi, hi, lo)
    code = code | torch.where(torch.signbit(x), 0x80, 0)
    code = torch.where(torch.isnan(x), torch.full_like(code, nan_code), code)
    return code.to(torch.uint8)


def fp8_steps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """How many representable values apart two tensors of non-NaN codes are
    (+0 and -0 are one value)."""
    def key(c):
        c = c.to(torch.int64)
        mag = c & 0x7F
        return torch.where(c >= 0x80, -mag, mag)
    return (key(a) - key(b)).abs()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, interleaved: bool) -> torch.Tensor:
    """RoPE of x [..., R] in float32 with cos/sin [..., R/2] (broadcast over heads)."""
    x = x.float()
    if interleaved:
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:
        half = x.shape[-1] // 2
        x1, x2 = x[..., :half], x[..., half:]
    y1 = x1 * cos - x2 * sin
    y2 = x2 * cos + x1 * sin
    if interleaved:
        return torch.stack((y1, y2), dim=-1).flatten(-2)
    return torch.cat((y1, y2), dim=-1)


def quantize(x: torch.Tensor, fmt: str, scale: float, multiply: bool) -> torch.Tensor:
    """FP8 codes of float32 x / scale (or x * scale), each one IEEE float32 operation."""
    s = torch.tensor(scale, dtype=torch.float32)
    y = x.float() * s if multiply else x.float() / s
    return fp8_encode(fmt, y).view(x.shape)
