// Placeholder until the Kubernetes issue lands the real client.
#include "kube/kube.h"

namespace nodegate {

Result<std::unique_ptr<Publisher>> makeKubePublisher(const Options&, const Config&,
                                                     prometheus::Registry&) {
  return Error{ENOSYS, "failed to start kubernetes publisher: not built yet"};
}

}  // namespace nodegate
