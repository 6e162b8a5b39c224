// test/gpu/count_other.cu: the kernel the GPU tests launch to read memory
// from a kernel (not only through copies), also a peer GPU's.  Its PTX is
// kept in count_other_ptx.h, so the tests build without nvcc; regenerate
// with:  nvcc -arch=compute_75 -ptx count_other.cu -o - | python3 ptx_to_header.py
extern "C" __global__ void xseg_count_other(const unsigned *src, unsigned long long n, unsigned want,
                                            unsigned *bad) {
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    if (src[i] != want) atomicAdd(bad, 1u);
}
