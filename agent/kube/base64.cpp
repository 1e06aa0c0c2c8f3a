#include "kube/base64.h"

namespace nodegate::kube {

std::string base64Decode(std::string_view in, bool* ok) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve(in.size() / 4 * 3);
  unsigned buf = 0;
  int bits = 0;
  *ok = true;
  for (char c : in) {
    if (c == '=' || c == '\n' || c == '\r' || c == ' ') continue;
    auto pos = kAlphabet.find(c);
    if (pos == std::string_view::npos) {
      *ok = false;
      return {};
    }
    buf = (buf << 6) | static_cast<unsigned>(pos);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace nodegate::kube
