// The kernels of every example program, compiled once here: the programs'
// units only declare the kernel table (STREAMLLM_KERNELS_IN_ONE_UNIT,
// examples/CMakeLists.txt; kernel_table.hpp says how).
#define STREAMLLM_KERNELS_UNIT
#include "streamllm/kernels/matmul/kernel_table.hpp"
