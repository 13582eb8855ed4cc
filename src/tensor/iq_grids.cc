#include "tensor/quant_blocks.h"

namespace infera {

const uint32_t kIq3sGrid[512] = {
#include "tensor/iq3s_grid.inc"
};

const uint64_t kIq2xsGrid[512] = {
#include "tensor/iq2xs_grid.inc"
};

}  // namespace infera
