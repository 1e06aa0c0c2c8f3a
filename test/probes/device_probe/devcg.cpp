// devcg MODE NAME -- CMD [ARGS...]: runs CMD in a new cgroup NAME whose device controller refuses
// what Kubernetes refuses an unprivileged container: /dev/kvm (c 10:232), /dev/net/tun (c 10:200)
// and every block device, the way the kernel enforces it.
//   v1:  the cgroup v1 devices controller (devices.deny: "c 10:232 rwm", "c 10:200 rwm",
//        "b *:* rwm"), as container runtimes program it on cgroup v1 hosts;
//   bpf: a BPF_PROG_TYPE_CGROUP_DEVICE program attached to a cgroup v2 directory, as runc and
//        crun program it on cgroup v2 hosts (also enforced on a hybrid host's unified hierarchy).
// The cgroup is left behind for the caller to remove (rmdir) once CMD and its children are gone.
#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

int die(const std::string& what) {
  std::fprintf(stderr, "devcg: %s: %s\n", what.c_str(), std::strerror(errno));
  return 125;
}

bool writeFile(const std::string& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  return ok;
}

// The cgroup2 mount point: /sys/fs/cgroup on a v2 host, /sys/fs/cgroup/unified on a hybrid one.
std::string cgroup2Mount() {
  std::ifstream in("/proc/self/mountinfo");
  for (std::string line; std::getline(in, line);) {
    const auto dash = line.find(" - ");
    if (dash == std::string::npos || line.compare(dash + 3, 8, "cgroup2 ") != 0) continue;
    std::istringstream f(line);
    std::string id, parent, devno, root, mount;
    f >> id >> parent >> devno >> root >> mount;
    return mount;
  }
  return {};
}

bpf_insn insn(__u8 code, __u8 dst, __u8 src, __s16 off, __s32 imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

// Returns 0 (deny) for block devices and char 10:232 / 10:200, 1 (allow) for the rest.
// ctx is struct bpf_cgroup_dev_ctx { u32 access_type (access << 16 | type); u32 major, minor; }.
int loadDenyProgram() {
  const bpf_insn prog[] = {
      insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0),                    // 0: r2 = access_type
      insn(BPF_ALU64 | BPF_AND | BPF_K, 2, 0, 0, 0xffff),             // 1: r2 = type
      insn(BPF_JMP | BPF_JEQ | BPF_K, 2, 0, 7, BPF_DEVCG_DEV_BLOCK),  // 2: -> 10 deny
      insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0),                    // 3: r3 = major
      insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 3, 10),                   // 4: -> 8 allow
      insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0),                    // 5: r4 = minor
      insn(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 3, 232),                  // 6: -> 10 deny
      insn(BPF_JMP | BPF_JEQ | BPF_K, 4, 0, 2, 200),                  // 7: -> 10 deny
      insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1),                  // 8: allow
      insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),                           // 9
      insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0),                  // 10: deny
      insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),                           // 11
  };
  static char log[4096];
  bpf_attr attr{};
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<__u64>(prog);
  attr.insn_cnt = sizeof prog / sizeof prog[0];
  attr.license = reinterpret_cast<__u64>("GPL");
  attr.log_buf = reinterpret_cast<__u64>(log);
  attr.log_size = sizeof log;
  attr.log_level = 1;
  const int fd = static_cast<int>(::syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
  if (fd < 0) std::fprintf(stderr, "devcg: verifier log:\n%s\n", log);
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || std::strcmp(argv[3], "--") != 0) {
    std::fprintf(stderr, "usage: devcg v1|bpf NAME -- CMD [ARGS...]\n");
    return 2;
  }
  const std::string mode = argv[1], name = argv[2];
  std::string dir;
  if (mode == "v1") {
    dir = "/sys/fs/cgroup/devices/" + name;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return die("mkdir " + dir);
    for (const char* rule : {"c 10:232 rwm", "c 10:200 rwm", "b *:* rwm"})
      if (!writeFile(dir + "/devices.deny", rule)) return die(std::string("deny ") + rule);
  } else if (mode == "bpf") {
    const std::string root = cgroup2Mount();
    if (root.empty()) {
      errno = ENOENT;
      return die("find a cgroup2 mount");
    }
    dir = root + "/" + name;
    if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return die("mkdir " + dir);
    const int prog = loadDenyProgram();
    if (prog < 0) return die("load the device program");
    const int cg = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (cg < 0) return die("open " + dir);
    bpf_attr attr{};
    attr.target_fd = static_cast<__u32>(cg);
    attr.attach_bpf_fd = static_cast<__u32>(prog);
    attr.attach_type = BPF_CGROUP_DEVICE;
    attr.attach_flags = BPF_F_ALLOW_MULTI;
    if (::syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof attr) != 0)
      return die("attach the device program to " + dir);
    ::close(cg);
    ::close(prog);  // the attachment keeps the program until the cgroup goes
  } else {
    std::fprintf(stderr, "devcg: unknown mode %s\n", mode.c_str());
    return 2;
  }
  if (!writeFile(dir + "/cgroup.procs", std::to_string(::getpid()))) return die("enter " + dir);
  std::vector<char*> args(argv + 4, argv + argc);
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  return die(std::string("exec ") + args[0]);
}
