// The production KernelClock: adjtimex(2) with modes = 0, which only reads and needs no
// capability (node_exporter's timex collector reads the same fields).
#include <sys/timex.h>

#include <cerrno>

#include "nodegate/seams.h"

namespace nodegate {
namespace {

class SysKernelClock final : public KernelClock {
 public:
  Result<KernelTimex> adjtimex() override {
    struct timex tx {};
    tx.modes = 0;
    int state = ::adjtimex(&tx);
    if (state < 0) return errnoError(errno, "read the kernel clock state (adjtimex)");
    KernelTimex out;
    out.state = state;
    out.status = tx.status;
    out.maxerror_us = tx.maxerror;
    out.esterror_us = tx.esterror;
    out.offset = tx.offset;
    return out;
  }
};

}  // namespace

std::shared_ptr<KernelClock> makeSysKernelClock() {
  return std::make_shared<SysKernelClock>();
}

}  // namespace nodegate
