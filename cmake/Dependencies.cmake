# Every external library, all from Debian packages (tools/install-deps.sh installs them).
find_package(PkgConfig REQUIRED)
find_package(nlohmann_json 3.11 REQUIRED)
find_package(Threads REQUIRED)

if(NOT NODEGATE_FUZZ)
  find_package(prometheus-cpp CONFIG REQUIRED)
  find_package(civetweb CONFIG REQUIRED)  # the HTTP listeners (agent/publish/http_server.cpp)
  find_package(sdbus-c++ CONFIG REQUIRED)
  find_package(CURL REQUIRED)
  pkg_check_modules(LIBBPF REQUIRED libbpf)
  pkg_check_modules(LIBNL REQUIRED libnl-3.0 libnl-route-3.0)
  pkg_check_modules(LIBUDEV REQUIRED IMPORTED_TARGET libudev)
  pkg_check_modules(LIBYAML REQUIRED yaml-0.1)
  find_program(BPFTOOL bpftool PATHS /usr/sbin /sbin REQUIRED)
  find_program(BPF_CLANG clang REQUIRED)
endif()
if(NODEGATE_BUILD_TESTS AND NOT NODEGATE_FUZZ)
  find_package(GTest REQUIRED)
endif()

# libbpf (with the libelf and zlib it needs), libnl and libyaml link from Debian's static archives: the
# agent then maps five shared objects fewer (each costs its relocated data pages and the
# fault-around of its text: 0.6 MiB less RSS) and every command starts with fewer relocations
# (`nodegate version` 3.8 -> 3.0 ms CPU; docs/benchmarks/agent.md). The archives and their order
# come from `pkg-config --static`; the other libraries have no static archive in Debian and stay
# shared.
function(nodegate_static_pkg prefix target)
  set(archives)
  foreach(lib IN LISTS ${prefix}_STATIC_LIBRARIES)
    if(lib STREQUAL "pthread")
      list(APPEND archives Threads::Threads)
      continue()
    endif()
    unset(archive)  # find_library does not search again while the variable is set
    find_library(archive NAMES lib${lib}.a HINTS ${${prefix}_STATIC_LIBRARY_DIRS} NO_CACHE)
    if(NOT archive)
      message(FATAL_ERROR "failed to find static archive lib${lib}.a for ${prefix}: not installed "
                          "(tools/install-deps.sh installs the -dev package that ships it)")
    endif()
    list(APPEND archives ${archive})
  endforeach()
  add_library(${target} INTERFACE IMPORTED)
  target_include_directories(${target} SYSTEM INTERFACE ${${prefix}_STATIC_INCLUDE_DIRS})
  target_compile_options(${target} INTERFACE ${${prefix}_STATIC_CFLAGS_OTHER})
  target_link_libraries(${target} INTERFACE ${archives})
endfunction()
if(NOT NODEGATE_FUZZ)
  nodegate_static_pkg(LIBBPF nodegate::libbpf)
  nodegate_static_pkg(LIBNL nodegate::libnl)
  nodegate_static_pkg(LIBYAML nodegate::libyaml)
endif()
