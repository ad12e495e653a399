"""glibc's ``rand()`` after ``srand(seed)``, so the demo draws the C++ seed program's inputs.

glibc's default generator (TYPE_3) is an additive feedback generator over 34 words: seeded
by a Lehmer generator, warmed up by discarding 310 values, each output r[i] = r[i-3] + r[i-31]
(mod 2^32), returned shifted right by one.
"""
from __future__ import annotations

RAND_MAX = 2147483647


class GlibcRand:
    def __init__(self, seed: int):
        seed &= 0xFFFFFFFF
        if seed == 0:  # glibc: srand(0) behaves like srand(1)
            seed = 1
        word = seed - (1 << 32) if seed >= 1 << 31 else seed  # glibc keeps the seed as a signed int
        r = [word]
        for _ in range(1, 31):
            hi, lo = int(word / 127773), word - int(word / 127773) * 127773  # C division truncates
            word = 16807 * lo - 2836 * hi
            if word < 0:
                word += 2147483647
            r.append(word)
        r.extend(r[i - 31] for i in range(31, 34))
        self._r = [v & 0xFFFFFFFF for v in r]
        for _ in range(34, 344):
            self._next_word()

    def _next_word(self) -> int:
        r = self._r
        value = (r[-3] + r[-31]) & 0xFFFFFFFF
        r.append(value)
        del r[0]
        return value

    def rand(self) -> int:
        """The next value of rand(), in [0, RAND_MAX]."""
        return self._next_word() >> 1
