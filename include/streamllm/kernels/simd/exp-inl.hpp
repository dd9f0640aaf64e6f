// exp over a family's Vec, in the arithmetic of xsimd's (Cephes' reduction,
// Boost.SIMD's polynomial), so that a family's exp and xsimd's give the same
// bits: x = k ln 2 + r with |r| <= ln 2 / 2 (ln 2 in two parts, so that
// k ln2_hi is exact), e^r = 1 + r + r^2 P(r), and 2^k put into the exponent.
// Included by a family's vector header, inside its namespace and target
// region (no include guard: once per family).

inline Vec exp(Vec x) {
  auto f = [](std::uint32_t bits) { return Vec(std::bit_cast<float>(bits)); };
  const Vec k = round_nearest(Vec(1.442695040888963407359924681001892137426645954152986f) * x);  // x / ln 2
  Vec r = fnma(k, f(0x3f318000), x);                                                             // ln 2's high part, 0.693359375
  r = fnma(k, f(0xb95e8083), r);                                                                 // and the rest, -2.12194440e-4
  // P(r) ~ 1/2 + r/6 + r^2/24 + r^3/120 + r^4/720, by Horner's scheme.
  Vec p = fma(r, f(0x3ab778cf), f(0x3c098d8b));
  p = fma(r, p, f(0x3d2aa957));
  p = fma(r, p, f(0x3e2aa9a5));
  p = fma(r, p, f(0x3f000000));
  const Vec e = times_pow2(fma(p, r * r, r) + Vec(1.0f), k);
  // Past float's range: 0 below, infinity above.
  const Vec zero_below = select(x <= Vec(-88.3762626647949f), Vec(0.0f), e);
  return select(x >= Vec(88.3762626647949f), Vec(std::numeric_limits<float>::infinity()), zero_below);
}
