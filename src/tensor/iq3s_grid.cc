#include "tensor/quant_blocks.h"

namespace infera {

const uint32_t kIq3sGrid[512] = {
#include "tensor/iq3s_grid.inc"
};

}  // namespace infera
