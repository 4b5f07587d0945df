// Causal attention with a position bias read by distance, fp32, forward only: posexp's CPU
// kernel for evaluating bias PEs (ALiBi, T5, Kerple, Sandwich, FIRE). Built and loaded by
// posexp/kernels/cpp_bias.py, which documents the layout of every argument.
//
// One task is a block of QB queries of one (batch, head) row; it walks the key tiles up to its
// diagonal with an online softmax, so nothing larger than a QB x KB tile of scores exists.
// Scores, bias and softmax run across keys (vectors of W floats); P V runs across head dims.
// Written with the GCC/Clang vector extension, so one source serves AVX2, AVX-512 and NEON.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace {

// Floats per vector across keys: the CPU's own width unless the build sets it (tests build both
// widths on one machine; a wider vector than the CPU's is split by the compiler).
#if defined(POSEXP_VECTOR_FLOATS)
constexpr int W = POSEXP_VECTOR_FLOATS;
#elif defined(__AVX512F__)
constexpr int W = 16;
#else
constexpr int W = 8;
#endif
typedef float vf __attribute__((vector_size(W * 4)));
typedef int32_t vi __attribute__((vector_size(W * 4)));
typedef float vf_unaligned __attribute__((vector_size(W * 4), aligned(4)));
typedef float v8 __attribute__((vector_size(32)));  // head dims come in multiples of 8
typedef float v8_unaligned __attribute__((vector_size(32), aligned(4)));

constexpr int QB = 32;  // queries per task
constexpr int KB = 128; // keys per tile (the Python side pads keys and tables by this much)
constexpr int RB = 4;   // query rows per register block
static_assert(KB % W == 0 && QB % RB == 0, "tile sizes");

inline vf load(const float* p) { return *reinterpret_cast<const vf_unaligned*>(p); }
inline void store(float* p, vf x) { *reinterpret_cast<vf_unaligned*>(p) = x; }
inline vf splat(float x) { return vf{} + x; }
inline vf vmax(vf a, vf b) { return a > b ? a : b; }

// e^x for x <= 0 (a score minus its row's maximum), within 2 ulp of expf: x = n ln2 + r with
// |r| <= ln2/2, e^r by a degree-6 polynomial (Cephes' coefficients), 2^n from the exponent bits.
// Below -87 (masked keys are -inf) it is 0: e^-87 is 1.6e-38 of a row whose sum is at least 1.
// NaN stays NaN (a diverged model must not score as a finite one).
inline vf vexp(vf x_in) {
    const vf x = x_in < splat(-87.0f) ? splat(-87.0f) : x_in;
    const vf round = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
    vf n = (x * 1.44269504088896341f + round) - round;
    vf r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    vf p = splat(1.9875691500e-4f);
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    vi bits = (__builtin_convertvector(n, vi) + 127) << 23;
    const vf y = p * (vf)bits;  // a vector cast keeps the bits
    return x_in < splat(-87.0f) ? vf{} : y;
}

inline float hmax(vf x) {
    float m = x[0];
    for (int t = 1; t < W; ++t) m = std::max(m, x[t]);
    return m;
}

inline float hsum(vf x) {
    float s = 0.f;
    for (int t = 0; t < W; ++t) s += x[t];
    return s;
}

struct Bias {
    int kind;                  // 0: none; 1: a table per head; 2: piecewise linear (FIRE);
                               // 3: c_i - c_j, c a running sum per row (FoX's forget gate)
    const float* table;        // reversed by distance: kind 1 (H, T + KB), kind 2 (T + KB);
                               // kind 3: c in order, (rows, T + KB)
    const float* row_scale;    // kind 2: (T,), multiplies the table entry per query
    const float* intercept;    // kind 2: (H,)
    const float* slope;        // kind 2: (H,)
    const float* kinks;        // kind 2: (U,)
    const float* gains;        // kind 2: (H, U)
    int units;
};

// The bias of kind 2 over one tile: f_h(u) = intercept + slope u + sum_t gain_t relu(u - kink_t)
// at u = table[d] * row_scale[i]. u falls as the key index rises (the table grows with
// distance), so over a tile it spans [u at its last key, u at its first]: units whose kink lies
// below that range are linear throughout and join the affine part, units above it are off, and
// only those bending inside are evaluated per key.
inline void add_piecewise(float* s, const float* tab, int nvec, const Bias& b, int64_t h,
                          float scale) {
    const float* gain = b.gains + h * b.units;
    const float u_high = tab[0] * scale, u_low = tab[nvec * W - 1] * scale;
    float c0 = b.intercept[h], c1 = b.slope[h];
    int bending[256];
    int nb = 0;
    for (int t = 0; t < b.units && t < 256; ++t) {
        if (b.kinks[t] <= u_low) {
            c0 -= gain[t] * b.kinks[t];
            c1 += gain[t];
        } else if (b.kinks[t] < u_high) {
            bending[nb++] = t;
        }
    }
    const vf a0 = splat(c0), a1 = splat(c1), sv = splat(scale);
    for (int cv = 0; cv < nvec; ++cv) {
        const vf u = load(tab + cv * W) * sv;
        vf value = a0 + a1 * u;
        for (int x = 0; x < nb; ++x)
            value += gain[bending[x]] * vmax(u - b.kinks[bending[x]], vf{});
        store(s + cv * W, load(s + cv * W) + value);
    }
}

template <int D>
void query_block(const float* q, const float* kt, const float* v, float* out, int64_t T,
                 int64_t h, int64_t i0, float scale, const Bias& bias, const float* gate) {
    constexpr int DV = D / 8;
    const int64_t TP = T + KB;  // a row of the transposed, padded keys
    alignas(64) float qs[QB][D];
    alignas(64) float S[QB][KB];
    alignas(64) float acc[QB][D];
    float m[QB], l[QB];
    const int rows = static_cast<int>(std::min<int64_t>(QB, T - i0));
    for (int r = 0; r < QB; ++r) {
        m[r] = -INFINITY;
        l[r] = 0.f;
        for (int d = 0; d < D; ++d) {
            acc[r][d] = 0.f;
            qs[r][d] = r < rows ? q[(i0 + r) * D + d] * scale : 0.f;
        }
    }
    const int64_t key_end = i0 + rows;
    for (int64_t j0 = 0; j0 < key_end; j0 += KB) {
        const int cols = static_cast<int>(std::min<int64_t>(KB, key_end - j0));
        const int nvec = (cols + W - 1) / W;
        // S = (Q scale) K^T, RB rows by one vector of keys at a time
        for (int r = 0; r < QB; r += RB) {
            for (int cv = 0; cv < nvec; ++cv) {
                vf a[RB] = {};
                for (int d = 0; d < D; ++d) {
                    const vf kv = load(kt + d * TP + j0 + cv * W);
                    for (int t = 0; t < RB; ++t) a[t] += qs[r + t][d] * kv;
                }
                for (int t = 0; t < RB; ++t) store(&S[r + t][cv * W], a[t]);
            }
        }
        for (int r = 0; r < rows; ++r) {
            const int64_t i = i0 + r;
            float* s = S[r];
            const int64_t at = T - 1 - i + j0;  // the reversed tables' entry for key j0
            if (bias.kind == 1) {
                const float* tab = bias.table + h * TP + at;
                for (int cv = 0; cv < nvec; ++cv) store(s + cv * W, load(s + cv * W) + load(tab + cv * W));
            } else if (bias.kind == 2) {
                add_piecewise(s, bias.table + at, nvec, bias, h, bias.row_scale[i]);
            } else if (bias.kind == 3) {
                const vf ci = splat(gate[i]);
                for (int cv = 0; cv < nvec; ++cv)
                    store(s + cv * W, load(s + cv * W) + (ci - load(gate + j0 + cv * W)));
            }
            const int visible = static_cast<int>(std::min<int64_t>(cols, i - j0 + 1));
            for (int c = visible; c < nvec * W; ++c) s[c] = -INFINITY;
            vf mv = splat(m[r]);
            for (int cv = 0; cv < nvec; ++cv) mv = vmax(mv, load(s + cv * W));
            const float mx = hmax(mv);
            const float correction = std::exp(m[r] - mx);
            m[r] = mx;
            vf sum{};
            const vf mxv = splat(mx);
            for (int cv = 0; cv < nvec; ++cv) {
                const vf p = vexp(load(s + cv * W) - mxv);
                store(s + cv * W, p);
                sum += p;
            }
            l[r] = l[r] * correction + hsum(sum);
            for (int d = 0; d < D; ++d) acc[r][d] *= correction;
        }
        for (int r = rows; r < QB; ++r)
            for (int c = 0; c < nvec * W; ++c) S[r][c] = 0.f;
        // acc += P V, RB rows at a time, across head dims
        for (int r = 0; r < QB; r += RB) {
            v8 a[RB][DV];
            for (int t = 0; t < RB; ++t)
                for (int e = 0; e < DV; ++e) a[t][e] = *reinterpret_cast<v8*>(&acc[r + t][e * 8]);
            for (int c = 0; c < cols; ++c) {
                v8 vv[DV];
                for (int e = 0; e < DV; ++e)
                    vv[e] = *reinterpret_cast<const v8_unaligned*>(v + (j0 + c) * D + e * 8);
                for (int t = 0; t < RB; ++t) {
                    const float p = S[r + t][c];
                    for (int e = 0; e < DV; ++e) a[t][e] += p * vv[e];
                }
            }
            for (int t = 0; t < RB; ++t)
                for (int e = 0; e < DV; ++e) *reinterpret_cast<v8*>(&acc[r + t][e * 8]) = a[t][e];
        }
    }
    for (int r = 0; r < rows; ++r) {
        const float inverse = 1.f / l[r];
        for (int d = 0; d < D; ++d) out[(i0 + r) * D + d] = acc[r][d] * inverse;
    }
}

template <int D>
void attention(const float* q, const float* kt, const float* v, float* out, int64_t rows,
               int64_t heads, int64_t T, float scale, const Bias& bias, int threads) {
    const int64_t blocks = (T + QB - 1) / QB;
    const int64_t tasks = rows * blocks;
    std::atomic<int64_t> next{0};
    auto work = [&]() {
        for (int64_t task; (task = next.fetch_add(1)) < tasks;) {
            // Longest blocks (last queries) first, so the short ones fill the end evenly.
            const int64_t row = task / blocks, block = blocks - 1 - task % blocks;
            query_block<D>(q + row * T * D, kt + row * (T + KB) * D, v + row * T * D,
                           out + row * T * D, T, row % heads, block * QB, scale, bias,
                           bias.kind == 3 ? bias.table + row * (T + KB) : nullptr);
        }
    };
    std::vector<std::thread> pool;  // no more threads than tasks: short inputs start few
    for (int64_t t = 1; t < std::min<int64_t>(threads, tasks); ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
}

}  // namespace

extern "C" int posexp_bias_attention(const float* q, const float* kt, const float* v,
                                     float* out, int64_t rows, int64_t heads, int64_t T,
                                     int64_t D, float scale, int kind, const float* table,
                                     const float* row_scale, const float* intercept,
                                     const float* slope, const float* kinks,
                                     const float* gains, int units, int threads) {
    const Bias bias{kind, table, row_scale, intercept, slope, kinks, gains, units};
    if (units > 256) return 2;
    threads = std::max(1, threads);
    switch (D) {
        case 8: attention<8>(q, kt, v, out, rows, heads, T, scale, bias, threads); return 0;
        case 16: attention<16>(q, kt, v, out, rows, heads, T, scale, bias, threads); return 0;
        case 32: attention<32>(q, kt, v, out, rows, heads, T, scale, bias, threads); return 0;
        case 64: attention<64>(q, kt, v, out, rows, heads, T, scale, bias, threads); return 0;
        case 128: attention<128>(q, kt, v, out, rows, heads, T, scale, bias, threads); return 0;
        default: return 1;
    }
}
