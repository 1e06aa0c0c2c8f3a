// kubevirt-node's parsers (a Node, a virt-handler pod, resource quantities) and its evaluator on
// whatever parsed, with device verdicts that disagree and agree.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "kubevirt_node.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  (void)nodegate::parseQuantityCount(text);
  auto node = nodegate::parseKubeVirtNode(text);
  if (!node) return 0;
  nodegate::KubeVirtNodeInputs in;
  in.facts.node = *node;
  in.facts.pods_complete = size % 2 == 0;
  auto json = nlohmann::json::parse(text, nullptr, false);
  if (nodegate::isVirtHandlerPod(json)) in.facts.handlers.push_back(nodegate::virtHandlerPod(json));
  in.now = std::chrono::system_clock::from_time_t(1800000000);
  for (const char* check : {"kvm-device", "tun", "vhost-net"}) {
    auto r = nodegate::makeResult(
        check, size % 3 == 0 ? nodegate::Status::Pass : nodegate::Status::Fail, "R", "m", "h");
    in.devices[check] = r;
  }
  (void)nodegate::evaluateKubeVirtNode(in);
  return 0;
}
