#include "corefile.h"

#include <arpa/inet.h>

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "text.h"

namespace nodegate {
namespace {

constexpr std::size_t kMaxCorefile = 1u << 20;
constexpr std::size_t kMaxServers = 4096;

// Whitespace-separated words of one line, "{" and "}" as words of their own, "#" to the end of
// the line a comment (inside quotes too rare in Corefiles to honour).
std::vector<std::string> words(std::string_view line) {
  std::vector<std::string> out;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty()) out.push_back(std::move(cur));
    cur.clear();
  };
  for (char c : line) {
    if (c == '#') break;
    if (c == ' ' || c == '\t' || c == '\r') {
      flush();
    } else if (c == '{' || c == '}') {
      flush();
      out.emplace_back(1, c);
    } else {
      cur += c;
    }
  }
  flush();
  return out;
}

// "cluster.local:53" -> zone "cluster.local", port 53; "dns://.:5353" -> ".", 5353.
bool serverKey(std::string key, CorefileServer& s) {
  for (const char* scheme : {"dns://", "tls://", "grpc://", "https://"})
    if (key.rfind(scheme, 0) == 0) key = key.substr(std::string_view(scheme).size());
  auto colon = key.rfind(':');
  if (colon != std::string::npos) {
    int port = 0;
    auto p = key.data() + colon + 1;
    auto [end, ec] = std::from_chars(p, key.data() + key.size(), port);
    if (ec != std::errc() || end != key.data() + key.size() || port <= 0 || port > 65535)
      return false;
    s.port = port;
    key.resize(colon);
  }
  if (key.empty()) return false;
  s.zones.push_back(std::move(key));
  return true;
}

void directive(const std::vector<std::string>& w, CorefileServer& s) {
  auto args = [&w] {
    std::vector<std::string> a;
    for (std::size_t i = 1; i < w.size() && w[i] != "{"; ++i) a.push_back(w[i]);
    return a;
  };
  if (w[0] == "kubernetes") {
    s.has_kubernetes = true;
    s.kubernetes_zones = args();
  } else if (w[0] == "forward") {
    auto a = args();
    if (!a.empty()) {
      s.forward_from = a.front();
      s.forward_to.assign(a.begin() + 1, a.end());
    }
  } else if (w[0] == "bind") {
    s.binds = args();
  } else if (w[0] == "import") {
    s.imports = true;
  }
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& x : v) out += (out.empty() ? "" : " ") + x;
  return out;
}

}  // namespace

Result<CorefileFacts> parseCorefile(std::string_view text) {
  if (text.size() > kMaxCorefile)
    return Error{EFBIG, "Corefile of " + std::to_string(text.size()) + " bytes (limit 1 MiB)"};
  CorefileFacts f;
  std::vector<std::string> pending_keys;  // server keys before their "{" (may span lines)
  int depth = 0;                          // 0: top level, 1: in a server block, 2+: options
  std::vector<std::string_view> lines;
  forEachLine(text, [&lines](std::string_view l) { lines.push_back(l); });
  std::size_t line_no = 0;
  for (std::string_view line : lines) {
    ++line_no;
    auto w = words(line);
    const std::string where = "Corefile line " + std::to_string(line_no);
    if (depth == 1 && !w.empty() && w[0] != "}" && w[0] != "{") directive(w, f.servers.back());
    if (depth == 0 && !w.empty() && w[0] == "import") {
      f.imports = true;
      continue;
    }
    for (const auto& word : w) {
      if (word == "{") {
        if (depth == 0) {
          if (pending_keys.empty()) return Error{EINVAL, where + ": a block without a zone"};
          if (f.servers.size() >= kMaxServers)
            return Error{E2BIG, where + ": more than 4096 server blocks"};
          CorefileServer s;
          for (auto& k : pending_keys)
            if (!serverKey(k, s)) return Error{EINVAL, where + ": bad server address " + k};
          pending_keys.clear();
          f.servers.push_back(std::move(s));
        }
        ++depth;
      } else if (word == "}") {
        if (depth == 0) return Error{EINVAL, where + ": } without {"};
        --depth;
      } else if (depth == 0) {
        pending_keys.push_back(word);
      }
    }
  }
  if (depth != 0) return Error{EINVAL, "Corefile: " + std::to_string(depth) + " unclosed {"};
  if (!pending_keys.empty())
    return Error{EINVAL, "Corefile: server " + pending_keys.front() + " has no block"};
  return f;
}

Result<CorefileFacts> parseCorefileConfigMap(std::string_view json_text) {
  nlohmann::json doc = nlohmann::json::parse(json_text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return Error{EINVAL, "not a JSON object"};
  auto data = doc.find("data");
  if (data == doc.end() || !data->is_object()) return Error{EINVAL, "no data in the ConfigMap"};
  auto core = data->find("Corefile");
  if (core == data->end() || !core->is_string())
    return Error{EINVAL, "no Corefile key in the ConfigMap's data"};
  return parseCorefile(core->get<std::string>());
}

std::vector<std::string> linkLocalBinds(const CorefileFacts& f) {
  std::vector<std::string> out;
  for (const auto& s : f.servers) {
    if (s.port != 53) continue;
    for (const auto& b : s.binds) {
      in_addr a{};
      if (::inet_pton(AF_INET, b.c_str(), &a) != 1) continue;  // names, IPv6, wildcards' forms
      const auto host = ntohl(a.s_addr);
      if ((host >> 16) != 0xA9FEu) continue;  // 169.254.0.0/16
      char text[INET_ADDRSTRLEN] = {};
      ::inet_ntop(AF_INET, &a, text, sizeof text);
      if (std::find(out.begin(), out.end(), text) == out.end()) out.emplace_back(text);
    }
  }
  return out;
}

std::vector<std::string> describeCorefile(const CorefileFacts& f) {
  std::vector<std::string> out;
  for (const auto& s : f.servers) {
    if (s.port != 53) continue;
    std::string line = joined(s.zones) + ":53";
    if (!s.binds.empty()) line += " on " + joined(s.binds);
    // The kubernetes plugin without zones answers the server block's own.
    const auto& k8s = s.kubernetes_zones.empty() ? s.zones : s.kubernetes_zones;
    line += s.has_kubernetes ? " answers " + joined(k8s) + " (kubernetes)"
                             : " holds no cluster zone (no kubernetes plugin)";
    if (!s.forward_to.empty())
      line += ", forwards " + s.forward_from + " to " + joined(s.forward_to);
    if (s.imports) line += " (an import nodegate does not read)";
    out.push_back(std::move(line));
  }
  if (out.empty()) out.emplace_back("no server block on port 53");
  if (f.imports) out.back() += "; top-level imports not read";
  return out;
}

}  // namespace nodegate
