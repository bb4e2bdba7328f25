/* Vector add in Kernel Tuner's C convention: the tunable parameters arrive as #defines
 * (block_size, unroll), the function's name and arguments are the kernel's own. */
void vector_add(float *c, const float *a, const float *b, int n)
{
    int i = 0;
    for (; i + block_size * unroll <= n; i += block_size * unroll) {
        for (int u = 0; u < unroll; u++) {
            for (int j = 0; j < block_size; j++) {
                c[i + u * block_size + j] = a[i + u * block_size + j] + b[i + u * block_size + j];
            }
        }
    }
    for (; i < n; i++) {
        c[i] = a[i] + b[i];
    }
}
