#include "kernels/cpu/avxvnni/avxvnni_kernels.h"

#include "kernels/cpu/avx2/qgemm256.h"
#include "kernels/qgemm_dispatch.h"

namespace infera::avxvnni {

void Fill(KernelTable* t) {
  t->qgemm = DispatchPackFormat<QGemm256Kernel<true>>;
  t->qgemm_variant = "avxvnni";
  t->qgemm_row = QGemmRow256<true>;
  t->qgemm_row_variant = "avxvnni";
  FillFlash(t);
}

}  // namespace infera::avxvnni
