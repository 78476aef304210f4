/* libmlp: a small multilayer perceptron (16 -> 32 tanh -> 1) trained by
 * SGD on synthetic regression data.  The "legacy library" of the native
 * example: train.c links it and calls these functions across the library
 * boundary, which is what lets hvdshim hook them without a rebuild. */
#ifndef MLP_H
#define MLP_H

#ifndef MLP_IN /* sizes can be set at build time (bench/run-native-bench.sh) */
#define MLP_IN 16
#endif
#ifndef MLP_HIDDEN
#define MLP_HIDDEN 32
#endif

/* Number of parameters (weights and biases, one flat float array). */
long mlp_nparams(void);
/* Random initial parameters from `seed`. */
void mlp_init(float *params, long n, unsigned seed);
/* Samples index*batch .. index*batch + batch - 1 of the synthetic data set
 * (the same sample number always gives the same sample). */
void data_batch(long index, int batch, float *x, float *y);
/* Mean squared error over the batch, and its gradient in `grad`. */
float mlp_grad(const float *params, const float *x, const float *y, int batch, float *grad);
/* params -= lr * grad */
void sgd_update(float *params, const float *grad, long n, float lr);

#endif
