// Hop ids of the guest DNS path (docs/dns-path.md, "One query, hop by hop"). The number is the
// order along the query direction; the tracer stamps it on every event of the device it was
// attached to, so an event says where it was seen without user space looking the device up again.
#pragma once

#include <cstdint>
#include <string_view>

namespace nodegate::dns {

enum class Hop : std::uint8_t {
  Unknown = 0,
  Tap = 1,           // launcher netns, tap*: query on ingress (from QEMU), reply on egress
  Bridge = 2,        // launcher netns, k6t-*: query on ingress, reply on egress
  LauncherEth0 = 4,  // launcher netns, eth0: query on egress (masqueraded), reply on ingress
  HostVeth = 5,      // host netns, the launcher eth0's peer: query on ingress
  HostOut = 6,       // host netns, the DNS server's veth peer: query on egress
  Server = 7,        // DNS server netns, eth0: query on ingress
};

// Stable names: metric label values ("hop") and API fields.
std::string_view hopName(Hop h);
Hop hopFromNumber(unsigned n);  // Unknown for numbers that are not a hop

// True when the hop lies on the host side or beyond, where the ClusterIP should be translated.
inline bool beyondLauncher(Hop h) {
  return static_cast<unsigned>(h) >= 5;
}

}  // namespace nodegate::dns
