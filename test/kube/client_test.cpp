// Client configuration and the pure parts of the HTTP client: kubeconfig/YAML, in-cluster
// files, Retry-After, the token bucket and backoff.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kube/client.h"
#include "kube/yaml_lite.h"

namespace nodegate::kube {
namespace {

using namespace std::chrono_literals;

// The shape `kubectl config view --raw` writes, with the sequences at the parent key's indent.
constexpr const char* kKubeconfig = R"(apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: aGVsbG8gY2E=   # "hello ca"
    server: https://10.0.0.1:6443/
  name: prod
- cluster:
    certificate-authority: ca/other.crt
    insecure-skip-tls-verify: true
    server: "https://other:443"
  name: other
contexts:
- context:
    cluster: prod
    user: agent
  name: prod-agent
- context: {cluster: other, user: bad}
  name: broken
current-context: prod-agent
kind: Config
preferences: {}
users:
- name: agent
  user:
    client-certificate-data: Y2VydA==
    client-key-data: a2V5
    token: 'it''s-a-token'
- name: execuser
  user:
    exec:
      command: aws
)";

TEST(YamlLite, ParsesKubectlStyleDocument) {
  auto doc = parseYamlSubset(kKubeconfig);
  // The flow mapping on one context is outside the subset and must say so, not guess.
  ASSERT_FALSE(doc);
  EXPECT_NE(doc.error().message.find("line 17"), std::string::npos) << doc.error().message;
  EXPECT_NE(doc.error().message.find("flow collections"), std::string::npos);
}

std::string withoutBrokenContext() {
  std::string text = kKubeconfig;
  auto at = text.find("- context: {cluster");
  auto end = text.find("current-context");
  return text.substr(0, at) + text.substr(end);
}

TEST(YamlLite, ScalarsSequencesAndMappings) {
  auto doc = parseYamlSubset(withoutBrokenContext());
  ASSERT_TRUE(doc) << doc.error().message;
  EXPECT_EQ((*doc)["clusters"].size(), 2u);
  EXPECT_EQ((*doc)["clusters"][1]["cluster"]["insecure-skip-tls-verify"], true);
  EXPECT_EQ((*doc)["clusters"][1]["cluster"]["server"], "https://other:443");
  EXPECT_EQ((*doc)["users"][0]["user"]["token"], "it's-a-token");
  EXPECT_TRUE((*doc)["preferences"].is_object());
  EXPECT_FALSE(parseYamlSubset("a: 1\n\tb: 2\n"));
  EXPECT_FALSE(parseYamlSubset("a: 1\na: 2\n"));
  EXPECT_FALSE(parseYamlSubset("a: |\n  text\n"));
  auto list = parseYamlSubset("- a\n- b: 1\n  c: 2\n-\n  d: 3\n");
  ASSERT_TRUE(list) << list.error().message;
  EXPECT_EQ(list->dump(), R"(["a",{"b":"1","c":"2"},{"d":"3"}])");
}

TEST(Kubeconfig, CurrentContextWithInlineData) {
  auto c = parseKubeconfig(withoutBrokenContext(), "/etc/kube");
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->server, "https://10.0.0.1:6443");
  EXPECT_EQ(c->ca_pem, "hello ca");
  EXPECT_EQ(c->cert_pem, "cert");
  EXPECT_EQ(c->key_pem, "key");
  EXPECT_EQ(c->token, "it's-a-token");
  EXPECT_FALSE(c->insecure);
}

TEST(Kubeconfig, RelativePathsAndErrors) {
  std::string text = withoutBrokenContext();
  text.replace(text.find("current-context: prod-agent"), 27, "current-context: other-ctx");
  text += "- name: other-ctx\n";  // not a context: must not be found
  auto c = parseKubeconfig(text, "/etc/kube");
  ASSERT_FALSE(c);
  EXPECT_NE(c.error().message.find("context \"other-ctx\" not found"), std::string::npos);

  std::string other = R"(clusters:
- name: o
  cluster:
    server: https://o
    certificate-authority: ca/o.crt
contexts:
- name: x
  context:
    cluster: o
    user: u
current-context: x
users:
- name: u
  user:
    tokenFile: tok
)";
  auto o = parseKubeconfig(other, "/etc/kube");
  ASSERT_TRUE(o) << o.error().message;
  EXPECT_EQ(o->ca_file, "/etc/kube/ca/o.crt");
  EXPECT_EQ(o->token_file, "/etc/kube/tok");

  std::string exec = other;
  exec.replace(exec.find("tokenFile: tok"), 14, "exec:\n      command: aws");
  auto e = parseKubeconfig(exec, "/");
  ASSERT_FALSE(e);
  EXPECT_NE(e.error().message.find("exec"), std::string::npos);
  EXPECT_FALSE(parseKubeconfig("current-context: x\n", "/"));
  EXPECT_FALSE(parseKubeconfig("- not a map\n", "/"));
}

TEST(InCluster, ReadsEnvAndServiceAccountDir) {
  auto dir = std::filesystem::temp_directory_path() / ("nodegate-kube-sa-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "tok-1\n";
  std::ofstream(dir / "ca.crt") << "ca";
  ::setenv("KUBERNETES_SERVICE_HOST", "fd00::1", 1);
  ::setenv("KUBERNETES_SERVICE_PORT", "443", 1);
  ASSERT_TRUE(inClusterAvailable(dir.string()));
  auto c = loadInCluster(dir.string());
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->server, "https://[fd00::1]:443");
  Credentials creds(*c, 0s);  // max age 0: every call re-reads, as after 60 s
  EXPECT_EQ(creds.token(), "tok-1");
  std::ofstream(dir / "token") << "tok-2\n";
  EXPECT_EQ(creds.token(), "tok-2");
  EXPECT_EQ(creds.caPem(), "ca");
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_FALSE(inClusterAvailable(dir.string()));
  EXPECT_FALSE(loadInCluster(dir.string()));
  std::filesystem::remove_all(dir);
}

TEST(Credentials, TokenCachedUntilInvalidated) {
  auto dir = std::filesystem::temp_directory_path() / ("nodegate-kube-tok-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "a";
  ClientConfig c;
  c.token_file = (dir / "token").string();
  Credentials creds(c, 60s);
  EXPECT_EQ(creds.token(), "a");
  std::ofstream(dir / "token") << "b";
  EXPECT_EQ(creds.token(), "a");  // within 60 s the cached token is used
  creds.invalidateToken();        // what a 401 does
  EXPECT_EQ(creds.token(), "b");
  std::filesystem::remove_all(dir);
}

TEST(RetryAfter, SecondsAndDates) {
  auto now = std::chrono::system_clock::from_time_t(1700000000);  // Tue, 14 Nov 2023 22:13:20 GMT
  EXPECT_EQ(parseRetryAfter(" 3\r\n", now), 3.0);
  EXPECT_EQ(parseRetryAfter("Tue, 14 Nov 2023 22:13:25 GMT", now), 5.0);
  EXPECT_EQ(parseRetryAfter("Tue, 14 Nov 2023 22:13:00 GMT", now), 0.0);
  EXPECT_FALSE(parseRetryAfter("soon", now));
  EXPECT_FALSE(parseRetryAfter("", now));
}

TEST(RateLimiter, BurstThenSteadyRate) {
  RateLimiter rl(5, 10);
  auto t = std::chrono::steady_clock::now() + 1s;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(rl.reserve(t).count(), 0.0) << i;
  EXPECT_NEAR(rl.reserve(t).count(), 0.2, 1e-9);
  EXPECT_NEAR(rl.reserve(t).count(), 0.4, 1e-9);
  // Two seconds later the queue has drained and 8 tokens are back.
  auto later = t + 2s;
  for (int i = 0; i < 8; ++i) EXPECT_EQ(rl.reserve(later).count(), 0.0) << i;
  EXPECT_GT(rl.reserve(later).count(), 0.0);
}

TEST(Backoff, GrowsWithJitterUpToCap) {
  Backoff b(0.5, 30, 7);
  double prev_ceiling = 0.5;
  for (int i = 0; i < 12; ++i) {
    double d = b.next();
    double ceiling = std::min(30.0, 0.5 * (1 << i));
    EXPECT_GE(d, ceiling / 2);
    EXPECT_LE(d, ceiling);
    prev_ceiling = ceiling;
  }
  EXPECT_EQ(prev_ceiling, 30.0);
  b.reset();
  EXPECT_LE(b.next(), 0.5);
}

TEST(Base64, DecodesAndRejects) {
  bool ok = false;
  EXPECT_EQ(base64Decode("aGVsbG8=", &ok), "hello");
  EXPECT_TRUE(ok);
  base64Decode("not*base64", &ok);
  EXPECT_FALSE(ok);
}

}  // namespace
}  // namespace nodegate::kube
