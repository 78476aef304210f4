/* libmlp (see mlp.h). */
#include "mlp.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define NP (MLP_HIDDEN * MLP_IN + MLP_HIDDEN + MLP_HIDDEN + 1)

long mlp_nparams(void) { return NP; }

static uint64_t mix(uint64_t z) { /* splitmix64 */
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

/* uniform in [-1, 1) */
static float unit(uint64_t key) { return (float)((double)(mix(key) >> 11) * (2.0 / 9007199254740992.0) - 1.0); }

void mlp_init(float *params, long n, unsigned seed) {
  for (long i = 0; i < n; i++) {
    float scale = i < MLP_HIDDEN * MLP_IN ? 1.0f / sqrtf((float)MLP_IN) : 1.0f / sqrtf((float)MLP_HIDDEN);
    params[i] = scale * unit(((uint64_t)seed << 32) ^ (uint64_t)i);
  }
}

void data_batch(long index, int batch, float *x, float *y) {
  for (int k = 0; k < batch; k++) {
    uint64_t s = (uint64_t)(index * batch + k);
    float dot1 = 0, dot2 = 0;
    for (int j = 0; j < MLP_IN; j++) {
      float v = unit(s * 64 + (uint64_t)j);
      x[k * MLP_IN + j] = v;
      dot1 += v * unit(0xfeed0000ULL + (uint64_t)j); /* a fixed "teacher" */
      dot2 += v * unit(0xbeef0000ULL + (uint64_t)j);
    }
    y[k] = sinf(dot1) + 0.5f * cosf(dot2);
  }
}

float mlp_grad(const float *p, const float *x, const float *y, int batch, float *grad) {
  const float *w1 = p, *b1 = p + MLP_HIDDEN * MLP_IN, *w2 = b1 + MLP_HIDDEN, *b2 = w2 + MLP_HIDDEN;
  static double acc[NP];
  memset(acc, 0, sizeof acc);
  double loss = 0;
  for (int k = 0; k < batch; k++) {
    const float *xk = x + k * MLP_IN;
    float h[MLP_HIDDEN], out = *b2;
    for (int i = 0; i < MLP_HIDDEN; i++) {
      float a = b1[i];
      for (int j = 0; j < MLP_IN; j++) a += w1[i * MLP_IN + j] * xk[j];
      h[i] = tanhf(a);
      out += w2[i] * h[i];
    }
    float d = out - y[k];
    loss += (double)d * d;
    float g = 2 * d; /* d loss / d out */
    acc[NP - 1] += g;
    for (int i = 0; i < MLP_HIDDEN; i++) {
      acc[MLP_HIDDEN * MLP_IN + MLP_HIDDEN + i] += (double)g * h[i];
      float gh = g * w2[i] * (1 - h[i] * h[i]);
      acc[MLP_HIDDEN * MLP_IN + i] += gh;
      for (int j = 0; j < MLP_IN; j++) acc[i * MLP_IN + j] += (double)gh * xk[j];
    }
  }
  for (int i = 0; i < NP; i++) grad[i] = (float)(acc[i] / batch);
  return (float)(loss / batch);
}

void sgd_update(float *params, const float *grad, long n, float lr) {
  for (long i = 0; i < n; i++) params[i] -= lr * grad[i];
}
