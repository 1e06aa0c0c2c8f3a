// libcurl, loaded on first use instead of at start-up.
//
// Why: linking libcurl makes the dynamic loader map it and its ~35 dependencies (gnutls, krb5,
// ldap, ssh2, ...) before main() runs: 6 ms of every start of the binary, on this machine about
// a third of what `nodegate check` costs in total, and check never uses curl. Only the kube
// publisher and `nodegate dns trace` do. So the binary does not link libcurl; this file defines
// the libcurl functions nodegate calls, and each one dlopen()s libcurl.so.4 (the soname Debian's
// libcurl4 ships, the same ABI the headers describe) the first time any of them runs, then
// forwards to it. Callers keep using <curl/curl.h> unchanged.
//
// If libcurl cannot be loaded, one error line says why and the functions answer the way libcurl
// answers a failure: curl_easy_init() and curl_slist_append() return NULL, curl_global_init()
// CURLE_FAILED_INIT, the rest CURLE_BAD_FUNCTION_ARGUMENT or nothing. Every caller already
// handles a NULL handle.
//
// A binary that also links libcurl itself (a test) still works: its calls land here first (an
// executable's own definitions win) and are forwarded to the same library.
//
// Add a function here when code starts calling a new one: the link fails until then.
#define CURL_DISABLE_TYPECHECK  // the checks are macros named like the functions defined below
#include <curl/curl.h>
#include <dlfcn.h>

#include <cstdarg>
#include <mutex>
#include <string>

#include "nodegate/log.h"

namespace nodegate {
namespace {

constexpr const char* kLibcurl = "libcurl.so.4";

// Every libcurl function nodegate uses, resolved together: all or none.
struct Curl {
  decltype(&::curl_global_init) global_init = nullptr;
  decltype(&::curl_easy_init) easy_init = nullptr;
  decltype(&::curl_easy_setopt) easy_setopt = nullptr;
  decltype(&::curl_easy_perform) easy_perform = nullptr;
  decltype(&::curl_easy_getinfo) easy_getinfo = nullptr;
  decltype(&::curl_easy_cleanup) easy_cleanup = nullptr;
  decltype(&::curl_easy_reset) easy_reset = nullptr;
  decltype(&::curl_easy_strerror) easy_strerror = nullptr;
  decltype(&::curl_easy_escape) easy_escape = nullptr;
  decltype(&::curl_free) free = nullptr;
  decltype(&::curl_slist_append) slist_append = nullptr;
  decltype(&::curl_slist_free_all) slist_free_all = nullptr;
  decltype(&::curl_version) version = nullptr;
  bool loaded = false;
};

template <typename Fn>
bool bind(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(::dlsym(lib, name));
  if (!*out && missing->empty()) missing->assign(name);
  return *out != nullptr;
}

// The library, loaded once for the whole process; never unloaded (handles may outlive anyone
// who would unload it).
const Curl& curl() {
  static Curl c;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = ::dlopen(kLibcurl, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      const char* why = ::dlerror();
      log::error(std::string("failed to load ") + kLibcurl + ": " + (why ? why : "unknown error"));
      return;
    }
    std::string missing;
    bind(lib, "curl_global_init", &c.global_init, &missing);
    bind(lib, "curl_easy_init", &c.easy_init, &missing);
    bind(lib, "curl_easy_setopt", &c.easy_setopt, &missing);
    bind(lib, "curl_easy_perform", &c.easy_perform, &missing);
    bind(lib, "curl_easy_getinfo", &c.easy_getinfo, &missing);
    bind(lib, "curl_easy_cleanup", &c.easy_cleanup, &missing);
    bind(lib, "curl_easy_reset", &c.easy_reset, &missing);
    bind(lib, "curl_easy_strerror", &c.easy_strerror, &missing);
    bind(lib, "curl_easy_escape", &c.easy_escape, &missing);
    bind(lib, "curl_free", &c.free, &missing);
    bind(lib, "curl_slist_append", &c.slist_append, &missing);
    bind(lib, "curl_slist_free_all", &c.slist_free_all, &missing);
    bind(lib, "curl_version", &c.version, &missing);
    if (!missing.empty()) {
      log::error(std::string("failed to load ") + kLibcurl + ": it has no " + missing);
      ::dlclose(lib);
      c = Curl{};
      return;
    }
    c.loaded = true;
  });
  return c;
}

// Function-pointer options (CURLOPT_WRITEFUNCTION...) travel as some function pointer type; all
// have the same representation, and libcurl reads each back as its own callback type.
using AnyFunction = void (*)();

}  // namespace
}  // namespace nodegate

using nodegate::curl;

extern "C" {

// curl.h declares curl_easy_setopt/getinfo with an enum as the last named parameter; clang warns
// that va_start after a promoted type is undefined, but the prototype is libcurl's, not ours, and
// libcurl's own definitions do exactly this (an enum of int range is passed as an int).
#if defined(__clang__)
#pragma clang diagnostic ignored "-Wvarargs"
#endif

CURLcode curl_global_init(long flags) {
  return curl().loaded ? curl().global_init(flags) : CURLE_FAILED_INIT;
}

CURL* curl_easy_init(void) {
  return curl().loaded ? curl().easy_init() : nullptr;
}

// Variadic: the one argument after the option is read with the type libcurl itself reads for the
// option's type range (curl.h: CURLOPTTYPE_* are 0, 10000, 20000, 30000, 40000) and forwarded
// with that same type.
CURLcode curl_easy_setopt(CURL* handle, CURLoption option, ...) {
  if (!curl().loaded || !handle) return CURLE_BAD_FUNCTION_ARGUMENT;
  va_list ap;
  va_start(ap, option);
  CURLcode rc;
  const long o = static_cast<long>(option);
  if (o < CURLOPTTYPE_OBJECTPOINT) {  // CURLOPTTYPE_LONG and _VALUES
    long v = va_arg(ap, long);
    rc = curl().easy_setopt(handle, option, v);
  } else if (o < CURLOPTTYPE_FUNCTIONPOINT) {  // OBJECTPOINT, STRINGPOINT, SLISTPOINT, CBPOINT
    void* v = va_arg(ap, void*);
    rc = curl().easy_setopt(handle, option, v);
  } else if (o < CURLOPTTYPE_OFF_T) {
    nodegate::AnyFunction v = va_arg(ap, nodegate::AnyFunction);
    rc = curl().easy_setopt(handle, option, v);
  } else if (o < CURLOPTTYPE_BLOB) {
    curl_off_t v = va_arg(ap, curl_off_t);
    rc = curl().easy_setopt(handle, option, v);
  } else if (o < CURLOPTTYPE_BLOB + 10000) {
    void* v = va_arg(ap, void*);  // struct curl_blob*
    rc = curl().easy_setopt(handle, option, v);
  } else {
    rc = CURLE_UNKNOWN_OPTION;  // no such type range: reading an argument would be a guess
  }
  va_end(ap);
  return rc;
}

CURLcode curl_easy_perform(CURL* handle) {
  return curl().loaded && handle ? curl().easy_perform(handle) : CURLE_BAD_FUNCTION_ARGUMENT;
}

// Every CURLINFO takes one pointer to where the answer goes.
CURLcode curl_easy_getinfo(CURL* handle, CURLINFO info, ...) {
  if (!curl().loaded || !handle) return CURLE_BAD_FUNCTION_ARGUMENT;
  va_list ap;
  va_start(ap, info);
  void* out = va_arg(ap, void*);
  va_end(ap);
  return curl().easy_getinfo(handle, info, out);
}

void curl_easy_cleanup(CURL* handle) {
  if (curl().loaded && handle) curl().easy_cleanup(handle);
}

void curl_easy_reset(CURL* handle) {
  if (curl().loaded && handle) curl().easy_reset(handle);
}

const char* curl_easy_strerror(CURLcode code) {
  return curl().loaded ? curl().easy_strerror(code) : "libcurl.so.4 could not be loaded";
}

char* curl_easy_escape(CURL* handle, const char* string, int length) {
  return curl().loaded ? curl().easy_escape(handle, string, length) : nullptr;
}

void curl_free(void* p) {
  if (curl().loaded && p) curl().free(p);
}

struct curl_slist* curl_slist_append(struct curl_slist* list, const char* string) {
  return curl().loaded ? curl().slist_append(list, string) : nullptr;
}

void curl_slist_free_all(struct curl_slist* list) {
  if (curl().loaded && list) curl().slist_free_all(list);
}

char* curl_version(void) {
  static char unavailable[] = "libcurl.so.4 could not be loaded";
  return curl().loaded ? curl().version() : unavailable;
}

}  // extern "C"
