// The AMX tile configuration (palette 1) the kernels load with LDTILECFG.
// Header-only, internal linkage: each AMX file compiles its own copy.
#pragma once

#include <cstdint>

namespace infera::amx {
namespace {

// The 64-byte operand of LDTILECFG (palette 1: 8 tiles of up to 16 rows x
// 64 bytes). A tile not used has rows = colsb = 0.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// Loads c into the tile unit (zeroing every tile). Not GCC 12's
// _tile_loadconfig: its asm names only the first 8 bytes of the
// configuration as read, so the stores of rows and colsb could be dropped as
// dead; here the whole 64 bytes are the operand.
inline void LoadTileConfig(const TileConfig& c) { __asm__ volatile("ldtilecfg %0" ::"m"(c)); }

}  // namespace
}  // namespace infera::amx
