// Runs test/fakeapi/fake_apiserver.py for a gtest: TLS with a CA made at test time, a token,
// a kubeconfig, and small helpers for the /fake control endpoints and plain API calls.
#pragma once

#include <curl/curl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

namespace nodegate::testing {

class FakeApi {
 public:
  // dir_tag keeps parallel test binaries apart; the port is the first free one in port_range.
  explicit FakeApi(const std::string& dir_tag, const std::string& nodes = "node-a",
                   const std::string& port_range = "19300-19399") {
    dir_ = std::filesystem::temp_directory_path() /
           ("nodegate-fakeapi-" + dir_tag + "-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    std::string port_file = (dir_ / "port").string();
    pid_ = ::fork();
    if (pid_ == 0) {
      std::string script = std::string(NODEGATE_TEST_DIR) + "/fakeapi/fake_apiserver.py";
      std::string tls = (dir_ / "tls").string();
      std::freopen((dir_ / "server.log").c_str(), "w", stderr);
      std::vector<std::string> args = {
          "python3", script,    "--tls-dir",           tls, "--port-file",  port_file,
          "--token", "token-a", "--bookmark-interval", "1", "--port-range", port_range};
      std::stringstream ss(nodes);
      for (std::string n; std::getline(ss, n, ',');) {
        args.push_back("--node");
        args.push_back(n);
      }
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execvp("python3", argv.data());
      ::_exit(127);
    }
    for (int i = 0; i < 200 && port_ == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      std::ifstream in(port_file);
      in >> port_;
    }
    if (port_ == 0)
      throw std::runtime_error("failed to start fake apiserver (see " + dir_.string() +
                               "/server.log)");
    server_ = "https://127.0.0.1:" + std::to_string(port_);
    writeKubeconfig("kubeconfig", "token: token-a");
  }

  ~FakeApi() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  const std::filesystem::path& dir() const { return dir_; }
  const std::string& server() const { return server_; }
  std::string kubeconfig() const { return (dir_ / "kubeconfig").string(); }
  std::string caFile() const { return (dir_ / "tls" / "ca.crt").string(); }

  // A kubeconfig for this server with `user_yaml` (lines under "user:", 4-space indented).
  std::string writeKubeconfig(const std::string& name, const std::string& user_yaml) {
    std::ofstream f(dir_ / name);
    f << "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority: "
         "tls/ca.crt\n"
      << "    server: " << server_ << "\n  name: fake\ncontexts:\n- context:\n    cluster: fake\n"
      << "    user: agent\n  name: fake\ncurrent-context: fake\nusers:\n- name: agent\n  user:\n";
    std::stringstream ss(user_yaml);
    for (std::string l; std::getline(ss, l);) f << "    " << l << "\n";
    return (dir_ / name).string();
  }

  struct Reply {
    long code = 0;
    nlohmann::json body;
  };

  // Any request; "/fake/..." needs no token, API paths use token-a.
  Reply call(const std::string& method, const std::string& path,
             const nlohmann::json& body = nullptr,
             const std::string& content_type = "application/json") const {
    CURL* c = curl_easy_init();
    if (!c) return {};
    std::string url = server_ + path, out, data = body.is_null() ? "" : body.dump();
    std::string ca = trust_.empty() ? caFile() : trust_;
    curl_slist* h = nullptr;
    h = curl_slist_append(h, ("Content-Type: " + content_type).c_str());
    h = curl_slist_append(h, "Authorization: Bearer token-a");
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_CAINFO, ca.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 20L);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method.c_str());
    if (!body.is_null()) curl_easy_setopt(c, CURLOPT_POSTFIELDS, data.c_str());
    curl_easy_setopt(
        c, CURLOPT_WRITEFUNCTION, +[](char* p, size_t s, size_t n, void* u) {
          static_cast<std::string*>(u)->append(p, s * n);
          return s * n;
        });
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out);
    Reply r;
    if (curl_easy_perform(c) == CURLE_OK) curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &r.code);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    r.body = nlohmann::json::parse(out, nullptr, false);
    return r;
  }

  nlohmann::json node(const std::string& name) const {
    return call("GET", "/api/v1/nodes/" + name).body;
  }
  nlohmann::json requests(long since = 0) const {
    return call("GET", "/fake/requests?since=" + std::to_string(since)).body;
  }
  long lastSeq() const {
    auto r = requests();
    return r.empty() ? 0 : r.back()["seq"].get<long>();
  }
  nlohmann::json events() const { return call("GET", "/fake/events").body; }
  void fault(const nlohmann::json& f) const { call("POST", "/fake/faults", f); }
  void clearFaults() const { call("DELETE", "/fake/faults"); }

  // Back to a fresh server between test cases (see /fake/reset in fake_apiserver.py).
  void reset() {
    // Still trusting a rotated CA here: the server goes back to the first one as it answers.
    if (call("POST", "/fake/reset").code != 200)
      throw std::runtime_error("failed to reset fake apiserver");
    trust_.clear();
  }
  // The server switches to a certificate from a new CA made in `tls_dir` (ca.crt there); these
  // helpers trust both CAs from then on, until reset().
  void rotateTls(const std::filesystem::path& tls_dir) {
    if (call("POST", "/fake/tls", {{"tls_dir", tls_dir.string()}}).code != 200)
      throw std::runtime_error("failed to rotate the fake apiserver's certificate");
    std::ofstream out(dir_ / "trust.pem");
    out << std::ifstream(caFile()).rdbuf() << std::ifstream(tls_dir / "ca.crt").rdbuf();
    trust_ = (dir_ / "trust.pem").string();
  }

 private:
  std::filesystem::path dir_;
  pid_t pid_ = -1;
  int port_ = 0;
  std::string server_;
  std::string trust_;  // CA bundle for call() after rotateTls()
};

// Polls `pred` until it holds or `timeout` passes.
inline bool eventually(const std::function<bool()>& pred,
                       std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return pred();
}

}  // namespace nodegate::testing
