// The trampolines of agent/kube/curl_lazy.cpp against the real libcurl.so.4. Each option type is
// checked by an effect that a misread argument could not produce: a resume offset read as the
// wrong type would not skip exactly that many bytes, a size limit would not trip at that size.
#include <arpa/inet.h>
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <dlfcn.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int kPort = 19100;  // this test's port (test/agent/kube/CMakeLists.txt)

// Whether libcurl was mapped before main(): taken during static initialisation, after every
// linked library's constructors, so the answer does not depend on which test runs first.
const bool kCurlMappedAtStart = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_NOLOAD) != nullptr;

std::size_t collect(char* data, std::size_t size, std::size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

class FileTransfer : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/nodegate-curl-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    for (int i = 0; i < 1000; ++i) content_ += static_cast<char>('a' + i % 26);
    std::ofstream(dir_ + "/f") << content_;
    url_ = "file://" + dir_ + "/f";
    c_ = curl_easy_init();
    ASSERT_NE(c_, nullptr);
    ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_URL, url_.c_str()), CURLE_OK);
    ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_WRITEFUNCTION, collect), CURLE_OK);
    ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_WRITEDATA, &body_), CURLE_OK);
  }
  void TearDown() override {
    curl_easy_cleanup(c_);
    std::filesystem::remove_all(dir_);
  }
  std::string dir_, url_, content_, body_;
  CURL* c_ = nullptr;
};

TEST_F(FileTransfer, StringFunctionAndPointerOptions) {
  ASSERT_EQ(curl_easy_perform(c_), CURLE_OK);
  EXPECT_EQ(body_, content_);
  curl_off_t got = -1;
  ASSERT_EQ(curl_easy_getinfo(c_, CURLINFO_SIZE_DOWNLOAD_T, &got), CURLE_OK);
  EXPECT_EQ(got, 1000);
  char* effective = nullptr;
  ASSERT_EQ(curl_easy_getinfo(c_, CURLINFO_EFFECTIVE_URL, &effective), CURLE_OK);
  EXPECT_EQ(std::string(effective), url_);
}

TEST_F(FileTransfer, LongOptions) {
  ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_RESUME_FROM, 990L), CURLE_OK);
  ASSERT_EQ(curl_easy_perform(c_), CURLE_OK);
  EXPECT_EQ(body_, content_.substr(990));
  body_.clear();
  curl_easy_reset(c_);  // everything back to defaults: the URL too
  EXPECT_NE(curl_easy_perform(c_), CURLE_OK);
  curl_easy_setopt(c_, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(c_, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c_, CURLOPT_WRITEDATA, &body_);
  ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_RESUME_FROM, 1001L), CURLE_OK);
  EXPECT_EQ(curl_easy_perform(c_), CURLE_BAD_DOWNLOAD_RESUME);
}

TEST_F(FileTransfer, OffTOptions) {
  ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_RESUME_FROM_LARGE, curl_off_t{995}), CURLE_OK);
  ASSERT_EQ(curl_easy_perform(c_), CURLE_OK);
  EXPECT_EQ(body_, content_.substr(995));
  // All 64 bits arrive: cut to 32, 2^32 + 5 would be 5 and resume inside the file.
  body_.clear();
  ASSERT_EQ(curl_easy_setopt(c_, CURLOPT_RESUME_FROM_LARGE, (curl_off_t{1} << 32) + 5), CURLE_OK);
  EXPECT_EQ(curl_easy_perform(c_), CURLE_BAD_DOWNLOAD_RESUME);
  EXPECT_EQ(body_, "");
}

TEST_F(FileTransfer, BlobAndUnknownOptionTypes) {
  std::string pem = "not a certificate";
  curl_blob blob{pem.data(), pem.size(), CURL_BLOB_COPY};
  EXPECT_EQ(curl_easy_setopt(c_, CURLOPT_CAINFO_BLOB, &blob), CURLE_OK);
  // A type range libcurl does not define: refused without reading an argument.
  EXPECT_EQ(curl_easy_setopt(c_, static_cast<CURLoption>(90001), 1L), CURLE_UNKNOWN_OPTION);
  // An option of a known range that libcurl lacks gets libcurl's own answer.
  EXPECT_EQ(curl_easy_setopt(c_, static_cast<CURLoption>(9999), 1L), CURLE_UNKNOWN_OPTION);
}

TEST(CurlLazy, HelpersAndLists) {
  EXPECT_NE(std::string(curl_version()).find("libcurl/"), std::string::npos) << curl_version();
  EXPECT_EQ(curl_global_init(CURL_GLOBAL_DEFAULT), CURLE_OK);
  EXPECT_STREQ(curl_easy_strerror(CURLE_OK), "No error");
  CURL* c = curl_easy_init();
  ASSERT_NE(c, nullptr);
  char* e = curl_easy_escape(c, "ns/name x", 9);
  ASSERT_NE(e, nullptr);
  EXPECT_STREQ(e, "ns%2Fname%20x");
  curl_free(e);
  curl_slist* l = curl_slist_append(nullptr, "A: 1");
  l = curl_slist_append(l, "B: 2");
  ASSERT_NE(l, nullptr);
  ASSERT_NE(l->next, nullptr);
  EXPECT_STREQ(l->next->data, "B: 2");
  curl_slist_free_all(l);
  curl_easy_cleanup(c);
  // NULL handles are refused, not dereferenced.
  EXPECT_EQ(curl_easy_setopt(nullptr, CURLOPT_URL, "x"), CURLE_BAD_FUNCTION_ARGUMENT);
  EXPECT_EQ(curl_easy_perform(nullptr), CURLE_BAD_FUNCTION_ARGUMENT);
  long code = 0;
  EXPECT_EQ(curl_easy_getinfo(nullptr, CURLINFO_RESPONSE_CODE, &code), CURLE_BAD_FUNCTION_ARGUMENT);
  curl_easy_cleanup(nullptr);
  curl_easy_reset(nullptr);
}

TEST(CurlLazy, TheBinaryLinksNoLibcurlAndLoadsItOnFirstUse) {
  EXPECT_FALSE(kCurlMappedAtStart) << "libcurl was loaded at start-up: something links it again";
  // The first use races from several threads (ctest runs this test in a process of its own, so
  // here it really is the first): one load, every thread gets a handle.
  std::vector<std::thread> threads;
  std::vector<CURL*> handles(8);
  for (int i = 0; i < 8; ++i) threads.emplace_back([&, i] { handles[i] = curl_easy_init(); });
  for (auto& t : threads) t.join();
  for (CURL* h : handles) {
    EXPECT_NE(h, nullptr);
    curl_easy_cleanup(h);
  }
  void* lib = ::dlopen("libcurl.so.4", RTLD_NOW | RTLD_NOLOAD);
  EXPECT_NE(lib, nullptr);
  if (lib) ::dlclose(lib);
}

TEST(CurlLazy, HttpAgainstALocalServer) {
  int srv = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(srv, 0);
  int one = 1;
  ::setsockopt(srv, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(kPort);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(srv, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(srv, 1), 0);
  std::string request;
  std::thread server([&] {
    int c = ::accept(srv, nullptr, nullptr);
    if (c < 0) return;
    char buf[4096];
    ssize_t n = ::recv(c, buf, sizeof buf, 0);
    if (n > 0) request.assign(buf, static_cast<std::size_t>(n));
    const char reply[] =
        "HTTP/1.1 418 I'm a teapot\r\nContent-Length: 5\r\nConnection: close\r\n\r\nshort";
    [[maybe_unused]] ssize_t w = ::send(c, reply, sizeof reply - 1, MSG_NOSIGNAL);
    ::close(c);
  });
  CURL* c = curl_easy_init();
  ASSERT_NE(c, nullptr);
  std::string body;
  const std::string url = "http://127.0.0.1:" + std::to_string(kPort) + "/x";
  curl_slist* h = curl_slist_append(nullptr, "X-Nodegate: lazy");
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, collect);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  EXPECT_EQ(curl_easy_perform(c), CURLE_OK);
  long code = 0;
  EXPECT_EQ(curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code), CURLE_OK);
  server.join();
  ::close(srv);
  curl_slist_free_all(h);
  curl_easy_cleanup(c);
  EXPECT_EQ(code, 418);
  EXPECT_EQ(body, "short");
  EXPECT_NE(request.find("X-Nodegate: lazy"), std::string::npos) << request;
}

}  // namespace
