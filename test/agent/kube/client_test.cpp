// Client configuration and the pure parts of the HTTP client: kubeconfig/YAML, in-cluster
// files, Retry-After, the token bucket and backoff.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "kube/base64.h"
#include "kube/client_config.h"
#include "kube/cluster_dns.h"
#include "kube/credentials.h"
#include "kube/flow_control.h"
#include "kube/http.h"
#include "kube/kubeconfig.h"
#include "kube/yaml.h"

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

TEST(Yaml, KubectlStyleDocumentWithAFlowMapping) {
  auto docs = parseYamlDocuments(kKubeconfig);
  ASSERT_TRUE(docs) << docs.error().message;
  ASSERT_EQ(docs->size(), 1u);
  const auto& doc = docs->front();
  EXPECT_EQ(doc["clusters"].size(), 2u);
  EXPECT_EQ(doc["clusters"][1]["cluster"]["insecure-skip-tls-verify"], true);
  EXPECT_EQ(doc["clusters"][1]["cluster"]["server"], "https://other:443");
  EXPECT_EQ(doc["contexts"][1]["context"]["user"], "bad");
  EXPECT_EQ(doc["users"][0]["user"]["token"], "it's-a-token");
  EXPECT_TRUE(doc["preferences"].is_object());
}

TEST(Yaml, FlowJsonAnchorsMergeKeysAndScalars) {
  auto one = [](const char* text) {
    auto d = parseYamlDocuments(text);
    EXPECT_TRUE(d) << text << ": " << d.error().message;
    return d && !d->empty() ? d->front() : nlohmann::json();
  };
  EXPECT_EQ(one("{a: [1, 'x', \"y\"], b: {c: ~}}").dump(), R"({"a":["1","x","y"],"b":{"c":null}})");
  EXPECT_EQ(one(R"({"a": true, "b": [false, null, 2.5], "c": "s"})").dump(),
            R"({"a":true,"b":[false,null,"2.5"],"c":"s"})");
  // YAML 1.1 booleans as kubectl's go-yaml reads them; quoted, they stay strings.
  EXPECT_EQ(one("[yes, No, ON, off, y, N, 'yes', True]").dump(),
            R"([true,false,true,false,true,false,"yes",true])");
  EXPECT_EQ(one("base: &b {x: 1, y: 2}\nuse: *b\nover:\n  <<: *b\n  y: 3\n").dump(),
            R"({"base":{"x":"1","y":"2"},"over":{"x":"1","y":"3"},"use":{"x":"1","y":"2"}})");
  EXPECT_EQ(one("a: &a {k: a}\nb: &b {k: b, j: b}\nm:\n  <<: [*a, *b]\n").dump(),
            R"({"a":{"k":"a"},"b":{"j":"b","k":"b"},"m":{"j":"b","k":"a"}})");
  EXPECT_EQ(one("t: |\n  line 1\n  line 2\nf: >-\n  folded\n  text\n").dump(),
            R"({"f":"folded text","t":"line 1\nline 2\n"})");
  EXPECT_EQ(one("k: 1\nk: 2\n").dump(), R"({"k":"2"})");  // the last one, as kubectl
  auto multi = parseYamlDocuments("---\na: 1\n---\nb: 2\n...\n");
  ASSERT_TRUE(multi);
  EXPECT_EQ(multi->size(), 2u);
  auto empty = parseYamlDocuments("");
  ASSERT_TRUE(empty);
  EXPECT_TRUE(empty->empty());
}

TEST(Yaml, ErrorsNameWhereAndExpansionIsBounded) {
  auto tab = parseYamlDocuments("a: 1\n\tb: 2\n");
  ASSERT_FALSE(tab);
  EXPECT_NE(tab.error().message.find("line 2"), std::string::npos) << tab.error().message;
  EXPECT_FALSE(parseYamlDocuments("{a: [1, 2\n"));
  EXPECT_FALSE(parseYamlDocuments("? [a, b]\n: c\n"));  // a key JSON cannot have
  EXPECT_FALSE(parseYamlDocuments("a: *nothing\n"));
  EXPECT_FALSE(parseYamlDocuments("m:\n  <<: scalar\n"));
  // A billion laughs: ten aliases per level, nine levels, is 10^9 values once expanded.
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 10; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  auto b = parseYamlDocuments(bomb);
  ASSERT_FALSE(b);
  EXPECT_NE(b.error().message.find("aliases"), std::string::npos) << b.error().message;
  std::string deep(200, '[');
  EXPECT_FALSE(parseYamlDocuments(deep + std::string(200, ']')));
}

std::string withoutBrokenContext() {
  std::string text = kKubeconfig;
  auto at = text.find("- context: {cluster");
  auto end = text.find("current-context");
  return text.substr(0, at) + text.substr(end);
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

TEST(Kubeconfig, WrongTypesAreNotAThrow) {
  // A quoted boolean is text: not insecure (json::value<bool> used to throw on it).
  auto c = parseKubeconfig(
      "current-context: c\ncontexts: [{name: c, context: {cluster: k, user: 7}}]\n"
      "clusters: [{name: k, cluster: {server: https://k, insecure-skip-tls-verify: 'true'}}]\n",
      "/");
  ASSERT_FALSE(c);  // user "7" is not defined
  auto d = parseKubeconfig(
      "current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\n"
      "clusters: [{name: k, cluster: {server: https://k, insecure-skip-tls-verify: 'true'}}]\n",
      "/");
  ASSERT_TRUE(d) << d.error().message;
  EXPECT_FALSE(d->insecure);
  EXPECT_FALSE(parseKubeconfig("clusters: {a: b}\ncurrent-context: c\n", "/"));
}

TEST(Kubeconfig, PathListMergesAsKubectl) {
  auto dir =
      std::filesystem::temp_directory_path() / ("nodegate-kube-list-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "b");
  std::ofstream(dir / "a") << "current-context: c\ncontexts:\n- {name: c, context: {cluster: k, "
                              "user: u, namespace: ns}}\nusers:\n- {name: u, user: {token: a}}\n";
  std::ofstream(dir / "b" / "config")
      << R"({"current-context": "other", "clusters": [{"name": "k", "cluster": {"server":
         "https://b", "certificate-authority": "ca.crt"}}], "users": [{"name": "u", "user":
         {"token": "b"}}], "contexts": [{"name": "c", "context": {"cluster": "x"}}]})";
  const std::string list = (dir / "missing").string() + ":" + (dir / "a").string() +
                           "::" + (dir / "b" / "config").string();
  auto c = loadKubeconfigList(list);
  ASSERT_TRUE(c) << c.error().message;
  EXPECT_EQ(c->server, "https://b");
  EXPECT_EQ(c->token, "a");
  EXPECT_EQ(c->namespace_name, "ns");
  EXPECT_EQ(c->ca_file, (dir / "b" / "ca.crt").string());
  auto none = loadKubeconfigList((dir / "missing").string());
  ASSERT_FALSE(none);
  EXPECT_NE(none.error().message.find("none of the files exists"), std::string::npos);
  EXPECT_FALSE(loadKubeconfig((dir / "missing").string()));  // --kubeconfig: must exist
  std::filesystem::remove_all(dir);
}

std::string pemOf(const std::string& der);

TEST(RedactedUrl, MasksUserInformationOnly) {
  EXPECT_EQ(redactedUrl("https://user:pw@10.0.0.1:6443"), "https://REDACTED@10.0.0.1:6443");
  EXPECT_EQ(redactedUrl("https://user:p@ss@host/path?x=a@b"), "https://REDACTED@host/path?x=a@b");
  EXPECT_EQ(redactedUrl("https://token@[fd00::1]:6443/"), "https://REDACTED@[fd00::1]:6443/");
  EXPECT_EQ(redactedUrl("https://10.0.0.1:6443"), "https://10.0.0.1:6443");
  EXPECT_EQ(redactedUrl("https://host/a@b"), "https://host/a@b");
  EXPECT_EQ(redactedUrl(""), "");
}

TEST(InCluster, ReadsEnvAndServiceAccountDir) {
  auto dir =
      std::filesystem::temp_directory_path() / ("nodegate-kube-sa-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "token") << "tok-1\n";
  const std::string ca = pemOf("\x30\x82\x01\x0a" + std::string(200, 'c'));
  std::ofstream(dir / "ca.crt") << ca;
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
  EXPECT_EQ(creds.caPem(), ca);
  ::unsetenv("KUBERNETES_SERVICE_HOST");
  EXPECT_FALSE(inClusterAvailable(dir.string()));
  EXPECT_FALSE(loadInCluster(dir.string()));
  std::filesystem::remove_all(dir);
}

TEST(CredentialFiles, DevicesFifosAndHugeFilesAreClearErrors) {
  auto dir = std::filesystem::temp_directory_path() /
             ("nodegate-kube-files-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string(), big = (dir / "big").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::ofstream(big) << std::string(kMaxCredentialFileBytes + 1, '#');
  std::ofstream(dir / "ok") << "token\n";
  for (const auto& [path, why] :
       std::vector<std::pair<std::string, std::string>>{{"/dev/zero", "not a regular file"},
                                                        {fifo, "not a regular file"},
                                                        {big, "larger than"}}) {
    auto r = readCredentialFile(path, "token");  // a FIFO with no writer must not block
    ASSERT_FALSE(r) << path;
    EXPECT_NE(r.error().message.find("failed to read token " + path + ": "), std::string::npos)
        << r.error().message;
    EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
  }
  auto missing = readCredentialFile((dir / "missing").string(), "kubeconfig");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ENOENT);
  auto ok = readCredentialFile((dir / "ok").string(), "token");
  ASSERT_TRUE(ok) << ok.error().message;
  EXPECT_EQ(*ok, "token\n");
  // The same bound wherever credentials come from: the kubeconfig and the files it names.
  EXPECT_FALSE(loadKubeconfig(fifo));
  std::filesystem::remove_all(dir);
}

TEST(Credentials, TokenCachedUntilInvalidated) {
  auto dir =
      std::filesystem::temp_directory_path() / ("nodegate-kube-tok-" + std::to_string(::getpid()));
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

// A PEM block around `der` (base64 by hand: the test must not trust the code it tests).
std::string pemOf(const std::string& der) {
  static constexpr char kB64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b;
  for (std::size_t i = 0; i < der.size(); i += 3) {
    unsigned n = static_cast<unsigned char>(der[i]) << 16;
    if (i + 1 < der.size()) n |= static_cast<unsigned char>(der[i + 1]) << 8;
    if (i + 2 < der.size()) n |= static_cast<unsigned char>(der[i + 2]);
    b += kB64[(n >> 18) & 63];
    b += kB64[(n >> 12) & 63];
    b += i + 1 < der.size() ? kB64[(n >> 6) & 63] : '=';
    b += i + 2 < der.size() ? kB64[n & 63] : '=';
  }
  return "-----BEGIN CERTIFICATE-----\n" + b + "\n-----END CERTIFICATE-----\n";
}

TEST(CaBundle, AcceptsCertificateBlocksAndRefusesTheRest) {
  std::string der = "\x30\x82\x01\x0a" + std::string(300, 'x');
  auto one = checkCaBundle(pemOf(der));
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(*one, 1);
  auto two = checkCaBundle("# comment\n" + pemOf(der) + pemOf(der));
  ASSERT_TRUE(two);
  EXPECT_EQ(*two, 2);
  for (const std::string& bad :
       {std::string(), std::string("garbage\n"),
        pemOf("not a DER sequence but long enough to pass the size check"),
        pemOf(der).substr(0, 60),  // written half-way: no END line
        pemOf(der) + "-----BEGIN CERTIFICATE-----\n!!!\n-----END CERTIFICATE-----\n"}) {
    auto r = checkCaBundle(bad);
    EXPECT_FALSE(r) << bad;
    if (!r) {
      EXPECT_FALSE(r.error().message.empty());
    }
  }
}

TEST(CaBundle, GarbageReplacingAGoodFileKeepsTheGoodOne) {
  auto dir = std::filesystem::temp_directory_path() / ("nodegate-ca-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto file = dir / "ca.crt";
  std::string good = pemOf("\x30\x82\x01\x0a" + std::string(300, 'y'));
  std::ofstream(file) << good;
  ClientConfig c;
  c.ca_file = file.string();
  Credentials creds(c);
  EXPECT_EQ(creds.caPem(), good);
  EXPECT_EQ(creds.caError(), "");
  std::ofstream(dir / "tmp") << "oops";
  std::filesystem::rename(dir / "tmp", file);
  EXPECT_EQ(creds.caPem(), good);
  EXPECT_NE(creds.caError().find("failed to load kubernetes ca " + file.string() +
                                 ": no PEM certificate"),
            std::string::npos)
      << creds.caError();
  std::filesystem::remove(file);  // a missing file (mid-swap) also keeps the last good one
  EXPECT_EQ(creds.caPem(), good);
  EXPECT_NE(creds.caError().find("failed to read kubernetes ca"), std::string::npos);
  std::string next = pemOf("\x30\x82\x01\x0a" + std::string(300, 'z'));
  std::ofstream(dir / "tmp") << next;
  std::filesystem::rename(dir / "tmp", file);
  EXPECT_EQ(creds.caPem(), next);
  EXPECT_EQ(creds.caError(), "");
  std::filesystem::remove_all(dir);
}

// --- cluster DNS facts from literal API responses ---------------------------------------------

HttpResponse reply(long code, std::string body) {
  HttpResponse r;
  r.code = code;
  r.body = std::move(body);
  return r;
}

TEST(ClusterDnsRead, CiliumConfigMapAnswers) {
  ClusterDnsOptions o;
  ClusterDnsFacts f;
  readCiliumConfig(reply(200, R"({"kind":"ConfigMap","data":{"kube-proxy-replacement":"true"}})"),
                   o, f);
  EXPECT_EQ(f.cilium_read, ApiRead::Ok);
  EXPECT_TRUE(f.cilium.predictsIncident());  // KPR turns socket LB on everywhere by default
  readCiliumConfig(reply(404, R"({"kind":"Status","code":404})"), o, f);
  EXPECT_EQ(f.cilium_read, ApiRead::NotFound);
  EXPECT_FALSE(f.cilium.known);  // nothing left over from the previous read
  EXPECT_EQ(f.cilium_detail, "no Cilium: configmap kube-system/cilium-config does not exist");
  readCiliumConfig(reply(403, R"({"kind":"Status","code":403,"message":"forbidden by RBAC"})"), o,
                   f);
  EXPECT_EQ(f.cilium_read, ApiRead::Forbidden);
  EXPECT_NE(f.cilium_detail.find("HTTP 403: forbidden by RBAC"), std::string::npos)
      << f.cilium_detail;
  HttpResponse down;
  down.error = "Couldn't connect to server";
  readCiliumConfig(down, o, f);
  EXPECT_EQ(f.cilium_read, ApiRead::Failed);
  EXPECT_NE(f.cilium_detail.find("Couldn't connect"), std::string::npos);
  readCiliumConfig(reply(200, "[1,2]"), o, f);
  EXPECT_EQ(f.cilium_read, ApiRead::Failed);
  EXPECT_NE(f.cilium_detail.find("failed to parse cilium-config"), std::string::npos)
      << f.cilium_detail;
}

TEST(ClusterDnsRead, EndpointSlices) {
  ClusterDnsOptions o;
  ClusterDnsFacts f;
  readDnsEndpoints(reply(200, R"({"kind":"EndpointSliceList","items":[
      {"endpoints":[{"addresses":["10.0.0.5"],"nodeName":"n1"},
                    {"addresses":["10.0.0.6","10.0.0.7"],"conditions":{"ready":false}},
                    {"conditions":{"ready":true}}]},
      {"addressType":"IPv6","endpoints":[{"addresses":["FD00:0:0::05"],"conditions":{"ready":true}}]},
      {"endpoints":null}]})"),
                   o, f);
  ASSERT_EQ(f.endpoints_read, ApiRead::Ok) << f.endpoints_detail;
  ASSERT_EQ(f.dns_endpoints.size(), 4u);
  EXPECT_EQ(f.dns_endpoints[0].address, "10.0.0.5");
  EXPECT_EQ(f.dns_endpoints[0].node, "n1");
  EXPECT_TRUE(f.dns_endpoints[0].ready);  // unset conditions.ready means ready
  EXPECT_FALSE(f.dns_endpoints[2].ready);
  EXPECT_EQ(f.dns_endpoints[3].address, "fd00::5");  // inet_ntop() form, as events carry it
  readDnsEndpoints(reply(200, R"({"items":"nope"})"), o, f);
  EXPECT_EQ(f.endpoints_read, ApiRead::Failed);
  EXPECT_TRUE(f.dns_endpoints.empty());
  readDnsEndpoints(reply(403, "{}"), o, f);
  EXPECT_EQ(f.endpoints_read, ApiRead::Forbidden);
}

TEST(ClusterDnsRead, TheDnsServicesClusterIps) {
  ClusterDnsOptions o;
  ClusterDnsFacts f;
  // Dual stack: clusterIPs in the Service's order (the first is what kubelet puts first).
  readDnsService(reply(200, R"({"kind":"Service","spec":{"clusterIP":"10.96.0.10",
      "clusterIPs":["10.96.0.10","FD00:96::0A"],"ports":[{"port":53}]}})"),
                 o, f);
  ASSERT_EQ(f.service_read, ApiRead::Ok) << f.service_detail;
  EXPECT_EQ(f.service_ips, (std::vector<std::string>{"10.96.0.10", "fd00:96::a"}));
  EXPECT_NE(f.service_detail.find("service kube-system/kube-dns"), std::string::npos);
  // An old server: clusterIP alone.
  readDnsService(reply(200, R"({"spec":{"clusterIP":"10.96.0.10"}})"), o, f);
  EXPECT_EQ(f.service_ips, (std::vector<std::string>{"10.96.0.10"}));
  // Headless: read, no address.
  readDnsService(reply(200, R"({"spec":{"clusterIP":"None","clusterIPs":["None"]}})"), o, f);
  EXPECT_EQ(f.service_read, ApiRead::Ok);
  EXPECT_TRUE(f.service_ips.empty());
  EXPECT_NE(f.service_detail.find("headless"), std::string::npos);
  readDnsService(reply(200, R"({"spec":7})"), o, f);
  EXPECT_EQ(f.service_read, ApiRead::Failed);
  EXPECT_TRUE(f.service_ips.empty());
  readDnsService(reply(403, R"({"kind":"Status","message":"forbidden"})"), o, f);
  EXPECT_EQ(f.service_read, ApiRead::Forbidden);
  EXPECT_NE(f.service_detail.find("rbac.readDnsEndpoints"), std::string::npos) << f.service_detail;
  readDnsService(reply(404, "{}"), o, f);
  EXPECT_EQ(f.service_read, ApiRead::NotFound);
}

TEST(ClusterDnsRead, PathsAreEscaped) {
  ClusterDnsOptions o;
  EXPECT_EQ(ciliumConfigPath(o), "/api/v1/namespaces/kube-system/configmaps/cilium-config");
  EXPECT_EQ(dnsServicePath(o), "/api/v1/namespaces/kube-system/services/kube-dns");
  EXPECT_EQ(dnsEndpointSlicesPath(o),
            "/apis/discovery.k8s.io/v1/namespaces/kube-system/endpointslices?labelSelector="
            "kubernetes.io%2Fservice-name%3Dkube-dns");
  o.dns_service = "a&b";
  EXPECT_NE(dnsEndpointSlicesPath(o).find("a%26b"), std::string::npos);
}

}  // namespace
}  // namespace nodegate::kube
