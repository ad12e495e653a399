"""pyrms.ops._fma_twin.fma32 against the exact a * b + c (fractions) rounded once to fp32, on random operands and
on the sums whose float64 value lands halfway between two fp32 values (where rounding twice goes wrong)."""
from fractions import Fraction

import numpy as np
import pytest

from pyrms.ops._fma_twin import fma32

F32 = np.float32


def rounded_once(a, b, c):
    """The fp32 value nearest a * b + c, ties to the even significand, from the exact sum."""
    if not all(np.isfinite(v) for v in (a, b, c)):
        return F32(np.float64(a) * np.float64(b) + np.float64(c))
    exact = Fraction(float(a)) * Fraction(float(b)) + Fraction(float(c))
    guess = F32(float(exact))
    if np.isinf(guess):
        lo = np.finfo(F32).max * np.sign(guess)
        return guess if abs(exact) >= Fraction(2) ** 128 - Fraction(2) ** 103 else F32(lo)
    best = None
    for cand in (np.nextafter(guess, F32(-np.inf)), guess, np.nextafter(guess, F32(np.inf))):
        if not np.isfinite(cand):
            continue
        d = abs(Fraction(float(cand)) - exact)
        even = (int(np.asarray(cand).view(np.int32)) & 1) == 0
        if best is None or d < best[0] or (d == best[0] and even):
            best = (d, cand)
    out = best[1]
    return F32(0.0) if out == 0 and exact == 0 else out


def check(a, b, c):
    got = fma32(np.array(a, F32), np.array(b, F32), np.array(c, F32))
    for x, y, z, g in zip(np.atleast_1d(a), np.atleast_1d(b), np.atleast_1d(c), np.atleast_1d(got)):
        want = rounded_once(F32(x), F32(y), F32(z))
        assert np.asarray(g).view(np.int32) == np.asarray(want).view(np.int32) or (np.isnan(g) and np.isnan(want)), \
            (float(x).hex(), float(y).hex(), float(z).hex(), float(g).hex(), float(want).hex())


def test_random_operands(rng):
    n = 4000
    a = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(F32)
    b = (rng.standard_normal(n) * np.exp2(rng.integers(-20, 20, n))).astype(F32)
    c = np.where(rng.random(n) < 0.3, -(a.astype(np.float64) * b), rng.standard_normal(n) * np.exp2(
        rng.integers(-40, 40, n))).astype(F32)  # a third cancel nearly exactly
    check(a, b, c)


def test_halfway_in_float64_rounds_once():
    """c + a * b with a * b just off half an ulp of c: float64 rounds the sum onto the midpoint, and fp32 rounding
    that midpoint to even would be wrong: below, and (negated) above it."""
    a, b = F32(1 + 2.0 ** -20), F32(2.0 ** -24 * (1 - 2.0 ** -20))  # a * b = 2^-24 (1 - 2^-40)
    c = F32(1 + 2.0 ** -23)  # odd significand: the midpoint 1 + 2^-23 + 2^-24 rounds to even upwards
    assert np.float64(c) + np.float64(a) * np.float64(b) == 1 + 2.0 ** -23 + 2.0 ** -24  # the midpoint
    assert fma32(a, b, c) == c  # the exact sum is below it
    assert F32(np.float64(c) + np.float64(a) * np.float64(b)) != c  # what rounding twice gives
    assert fma32(-a, b, -c) == -c
    check([a, -a, a], [b, b, -b], [c, -c, -c])


@pytest.mark.parametrize("a, b, c, want", [
    (np.nan, 1.0, 1.0, np.nan), (np.inf, 0.0, 1.0, np.nan), (np.inf, 2.0, -1.0, np.inf),
    (3.0e38, 2.0, 0.0, np.inf), (-0.0, 1.0, 0.0, 0.0), (2.0 ** -130, 0.5, 0.0, 2.0 ** -131)])
def test_specials(a, b, c, want):
    got = fma32(F32(a), F32(b), F32(c))
    assert (np.isnan(got) and np.isnan(want)) or (got == want and np.signbit(got) == np.signbit(F32(want)))


def test_overflow_threshold():
    """Sums at FLT_MAX + half its ulp (the overflow threshold) round by the exact sum's side of it."""
    m = np.finfo(F32).max
    half = F32(2.0 ** 103)
    assert fma32(half, F32(1.0), m) == np.inf  # exactly the threshold: to even, which is the overflow
    assert fma32(half, F32(1 - 2.0 ** -24), m) == m  # just below it
