// Internal: single-precision GEMM for the CPU backend. B (the weights) is packed once into panels
// of kPanel columns; gemm_rows() computes C = A·B + bias for a block of rows on the calling thread
// (the backend parallelises over row blocks with oneTBB).
#pragma once

#include <vector>

namespace stoker::trainer::cpu {

inline constexpr int kPanel = 16;  // columns per packed panel
inline constexpr int kRows = 6;    // rows per micro-tile

struct PackedB {
  int k = 0;
  int n = 0;
  std::vector<float> data;  // [panel][k][kPanel], zero-padded past n
};

// B is row-major [k, n].
PackedB pack_b(const float* b, int k, int n);

// C[i, j] = sum_p A[i, p] * B[p, j] + bias[j] for i < m. A row-major with leading dimension lda,
// C with ldc. bias may be null.
void gemm_rows(const float* a, int lda, int m, const PackedB& b, const float* bias, float* c, int ldc);

}  // namespace stoker::trainer::cpu
