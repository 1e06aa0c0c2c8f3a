// Prints what nodegate resolves from a kubeconfig as one JSON object: --kubeconfig FILE, else
// $KUBECONFIG's path list, exactly as `nodegate agent --kube kubeconfig` loads it. With --get
// PATH it also sends one GET through a Connection built from it and adds the HTTP status. The
// bridge kubeconfig_oracle_test.py compares with what the real kubectl resolves and does.
#include <iostream>
#include <string>

#include <prometheus/registry.h>
#include <nlohmann/json.hpp>

#include "kube/client_config.h"
#include "kube/connection.h"

int main(int argc, char** argv) {
  using namespace nodegate::kube;
  std::string file, get;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--kubeconfig") file = argv[i + 1];
    if (a == "--get") get = argv[i + 1];
  }
  auto c = loadClientConfig("kubeconfig", file);
  nlohmann::json out;
  if (!c) {
    out["error"] = c.error().message;
    std::cout << out.dump() << "\n";
    return 1;
  }
  out = {{"server", c->server},
         {"ca_file", c->ca_file},
         {"ca_pem", c->ca_pem},
         {"insecure", c->insecure},
         {"token", c->token},
         {"token_file", c->token_file},
         {"cert_file", c->cert_file},
         {"cert_pem", c->cert_pem},
         {"key_file", c->key_file},
         {"key_pem", c->key_pem},
         {"namespace", c->namespace_name},
         {"source", c->source}};
  if (!get.empty()) {
    prometheus::Registry registry;
    Connection conn(*c, ConnectionSettings{}, registry);
    Stopper stop;
    ApiClient api(conn, stop);
    auto r = api.request("get", "GET", get, {}, {}, 20);
    out["get_status"] = r.code;
    out["get_error"] = describe(r);
  }
  std::cout << out.dump() << "\n";
  return 0;
}
