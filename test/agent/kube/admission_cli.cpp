// Reads {"pod": ..., "node": ...} lines on stdin and prints, per line, the C++ admission model's
// verdicts as {"kubelet": bool, "scheduler": bool} (or {"error": "..."}): the bridge
// admission_models_test.py compares with its independent model.
#include <iostream>
#include <string>

#include "publish/kube/admission.h"

int main() {
  using nlohmann::json;
  std::string line;
  while (std::getline(std::cin, line)) {
    json in = json::parse(line, nullptr, false);
    json out;
    auto pod = in.is_object() && in.contains("pod")
                   ? nodegate::kube::parsePodPlacement(in["pod"])
                   : nodegate::Result<nodegate::kube::PodPlacement>(nodegate::Error{0, "no pod"});
    if (!pod) {
      out["error"] = pod.error().message;
    } else {
      auto node = nodegate::kube::nodeFacts(in["node"]);
      out["kubelet"] = nodegate::kube::kubeletAdmission(*pod, node).admitted;
      out["scheduler"] = nodegate::kube::schedulerFilter(*pod, node).admitted;
    }
    std::cout << out.dump() << "\n" << std::flush;
  }
  return 0;
}
