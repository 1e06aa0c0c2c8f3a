#include "kvm_guest.h"

#include <linux/kvm.h>
#include <sys/ioctl.h>

#include <cstdio>
#include <cstring>

#include "device_node.h"

namespace nodegate {
namespace {

// The guest, as machine code with its assembly beside it. Bytes rather than a .S built by the
// toolchain: the build then needs no assembler and objcopy step, a cross build for arm64 (which
// cannot assemble x86) builds the same source, and the ~220 bytes stay reviewable where they
// are used. The QEMU test proves them: under TCG they report stages 1 to 7.
// Absolute addresses assume the load address 0x7c00; offsets are in the comments.
constexpr std::uint8_t kGuest[] = {
    // .code16 -- real mode, entered at 0000:7c00
    0xfa,                          // 00 cli                  no interrupts: there is no IDT
    0xea, 0x06, 0x7c, 0x00, 0x00,  // 01 ljmp $0,$0x7c06      CS:IP = 0000:7c06 (as a BIOS may not)
    0x31, 0xc0,                    // 06 xor %ax,%ax
    0x8e, 0xd8,                    // 08 mov %ax,%ds          DS = 0 for the lgdt operand
    0xb0, 0x01, 0xe6, 0xe9,        // 0a mov $1,%al; out %al,$0xe9        stage 1: real mode
    0x66, 0x0f, 0x01, 0x16, 0xd8, 0x7c,  // 0e lgdtl 0x7cd8    the GDT below, 32-bit base
    0x0f, 0x20, 0xc0,                    // 14 mov %cr0,%eax
    0x0c, 0x01,                          // 17 or $1,%al       CR0.PE
    0x0f, 0x22, 0xc0,                    // 19 mov %eax,%cr0
    0x66, 0xea, 0x24, 0x7c, 0x00, 0x00, 0x08, 0x00,  // 1c ljmpl $0x08,$0x7c24  32-bit code
    // .code32 -- protected mode
    0xb8, 0x10, 0x00, 0x00, 0x00,  // 24 mov $0x10,%eax       the flat data segment
    0x8e, 0xd8,                    // 29 mov %eax,%ds
    0x8e, 0xc0,                    // 2b mov %eax,%es
    0x8e, 0xd0,                    // 2d mov %eax,%ss
    0xb0, 0x02, 0xe6, 0xe9,        // 2f mov $2,%al; out %al,$0xe9        stage 2: protected mode
    // Identity page tables: PML4 0x1000 -> PDPT 0x2000 -> PD 0x3000, whose entry 0 maps the
    // first 2 MiB as one large page.
    0xbf, 0x00, 0x10, 0x00, 0x00,  // 33 mov $0x1000,%edi
    0x31, 0xc0,                    // 38 xor %eax,%eax
    0xb9, 0x00, 0x0c, 0x00, 0x00,  // 3a mov $0xc00,%ecx      3 pages of dwords
    0xf3, 0xab,                    // 3f rep stosl            zeroed
    0xc7, 0x05, 0x00, 0x10, 0x00, 0x00, 0x03, 0x20, 0x00, 0x00,  // 41 movl $0x2003,0x1000
    0xc7, 0x05, 0x00, 0x20, 0x00, 0x00, 0x03, 0x30, 0x00, 0x00,  // 4b movl $0x3003,0x2000
    0xc7, 0x05, 0x00, 0x30, 0x00, 0x00, 0x83, 0x00, 0x00, 0x00,  // 55 movl $0x83,0x3000 (PS)
    0x0f, 0x20, 0xe0,                                            // 5f mov %cr4,%eax
    0x0c, 0x20,                                                  // 62 or $0x20,%al         CR4.PAE
    0x0f, 0x22, 0xe0,                                            // 64 mov %eax,%cr4
    0xb8, 0x00, 0x10, 0x00, 0x00,                                // 67 mov $0x1000,%eax
    0x0f, 0x22, 0xd8,                                            // 6c mov %eax,%cr3        the PML4
    0xb0, 0x03, 0xe6, 0xe9,        // 6f mov $3,%al; out %al,$0xe9        stage 3: PAE and CR3
    0xb9, 0x80, 0x00, 0x00, 0xc0,  // 73 mov $0xc0000080,%ecx  IA32_EFER
    0x0f, 0x32,                    // 78 rdmsr
    0x89, 0xc3,                    // 7a mov %eax,%ebx        keep EFER's low half
    0xb0, 0x04, 0xe6, 0xe9,        // 7c mov $4,%al; out %al,$0xe9        stage 4: EFER read
    0x89, 0xd8,                    // 80 mov %ebx,%eax
    0x80, 0xcc, 0x01,              // 82 or $1,%ah            EFER.LME (bit 8)
    0x0f, 0x30,                    // 85 wrmsr
    0xb0, 0x05, 0xe6, 0xe9,        // 87 mov $5,%al; out %al,$0xe9        stage 5: EFER.LME set
    0x0f, 0x20, 0xc0,              // 8b mov %cr0,%eax
    0x0f, 0xba, 0xe8, 0x1f,        // 8e bts $31,%eax         CR0.PG: IA-32e (compatibility) mode
    0x0f, 0x22, 0xc0,              // 92 mov %eax,%cr0
    0xb0, 0x06, 0xe6, 0xe9,        // 95 mov $6,%al; out %al,$0xe9        stage 6: paging on
    0xea, 0xa0, 0x7c, 0x00, 0x00, 0x18, 0x00,  // 99 ljmp $0x18,$0x7ca0     64-bit code
    // .code64 -- long mode. In compatibility mode these bytes decode as other instructions
    // (0x48 is dec %eax there), so a 7 on the port proves 64-bit execution.
    0x48, 0xb8, 0x00, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00,  // a0 movabs $0x700000000,%rax
    0x48, 0xc1, 0xe8, 0x20,                                      // aa shr $32,%rax
    0xe6, 0xe9,                                // ae out %al,$0xe9  stage 7: long mode
    0xf4,                                      // b0 hlt
    0xf4, 0xf4, 0xf4, 0xf4, 0xf4, 0xf4, 0xf4,  // b1 padding to 8 bytes (hlt)
    // b8 GDT: null, 0x08 flat 32-bit code, 0x10 flat data, 0x18 64-bit code (L=1)
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,  // b8 null
    0xff, 0xff, 0x00, 0x00, 0x00, 0x9a, 0xcf, 0x00,  // c0 0x00cf9a000000ffff
    0xff, 0xff, 0x00, 0x00, 0x00, 0x92, 0xcf, 0x00,  // c8 0x00cf92000000ffff
    0xff, 0xff, 0x00, 0x00, 0x00, 0x9a, 0xaf, 0x00,  // d0 0x00af9a000000ffff
    0x1f, 0x00, 0xb8, 0x7c, 0x00, 0x00,              // d8 GDTR: limit 31, base 0x7cb8
};

std::string hex(std::uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string exitName(std::uint32_t reason) {
  switch (reason) {
    case KVM_EXIT_UNKNOWN:
      return "KVM_EXIT_UNKNOWN";
    case KVM_EXIT_EXCEPTION:
      return "KVM_EXIT_EXCEPTION";
    case KVM_EXIT_IO:
      return "KVM_EXIT_IO";
    case KVM_EXIT_HLT:
      return "KVM_EXIT_HLT";
    case KVM_EXIT_MMIO:
      return "KVM_EXIT_MMIO";
    case KVM_EXIT_SHUTDOWN:
      return "KVM_EXIT_SHUTDOWN";
    case KVM_EXIT_FAIL_ENTRY:
      return "KVM_EXIT_FAIL_ENTRY";
    case KVM_EXIT_INTR:
      return "KVM_EXIT_INTR";
    case KVM_EXIT_INTERNAL_ERROR:
      return "KVM_EXIT_INTERNAL_ERROR";
    case KVM_EXIT_SYSTEM_EVENT:
      return "KVM_EXIT_SYSTEM_EVENT";
    default:
      return "exit reason " + std::to_string(reason);
  }
}

}  // namespace

std::span<const std::uint8_t> builtinGuest() {
  return kGuest;
}

std::string_view guestStageName(GuestStage s) {
  switch (s) {
    case GuestStage::None:
      return "no instruction";
    case GuestStage::RealMode:
      return "real mode";
    case GuestStage::ProtectedMode:
      return "protected mode";
    case GuestStage::PaeAndCr3:
      return "PAE and CR3";
    case GuestStage::EferRead:
      return "EFER read";
    case GuestStage::EferLme:
      return "EFER.LME set";
    case GuestStage::Paging:
      return "paging on";
    case GuestStage::LongMode:
      return "64-bit long mode";
  }
  return "?";
}

std::string_view guestNextStep(GuestStage s) {
  switch (s) {
    case GuestStage::None:
      return "the first real-mode instruction";
    case GuestStage::RealMode:
      return "the switch to protected mode (lgdt, CR0.PE, far jump)";
    case GuestStage::ProtectedMode:
      return "setting CR4.PAE and loading CR3";
    case GuestStage::PaeAndCr3:
      return "reading EFER (rdmsr)";
    case GuestStage::EferRead:
      return "setting EFER.LME (wrmsr)";
    case GuestStage::EferLme:
      return "turning paging on (CR0.PG)";
    case GuestStage::Paging:
      return "the far jump into the 64-bit code segment";
    case GuestStage::LongMode:
      return "hlt";
  }
  return "?";
}

GuestExit decodeGuestExit(const void* run_area, std::size_t size) {
  GuestExit e;
  if (size < sizeof(kvm_run)) {
    e.what = "a kvm_run area of " + std::to_string(size) + " bytes, smaller than struct kvm_run";
    return e;
  }
  const auto* run = static_cast<const kvm_run*>(run_area);
  e.reason = run->exit_reason;
  e.what = exitName(run->exit_reason);
  switch (run->exit_reason) {
    case KVM_EXIT_HLT:
      e.kind = GuestExit::Kind::Halt;
      return e;
    case KVM_EXIT_IO: {
      const auto& io = run->io;
      e.what += std::string(io.direction == KVM_EXIT_IO_OUT ? " out" : " in") + " port " +
                hex(io.port) + " size " + std::to_string(io.size) + " count " +
                std::to_string(io.count);
      if (io.direction != KVM_EXIT_IO_OUT || io.port != kGuestPort || io.size != 1 || io.count != 1)
        return e;
      // The data lives inside the mapped area at data_offset: never read past its end.
      if (io.data_offset >= size) {
        e.what += " with its data outside the kvm_run area";
        return e;
      }
      e.kind = GuestExit::Kind::Stage;
      e.stage = static_cast<const std::uint8_t*>(run_area)[io.data_offset];
      return e;
    }
    case KVM_EXIT_SHUTDOWN:
      e.what += " (triple fault)";
      return e;
    case KVM_EXIT_INTERNAL_ERROR:
      e.what += " suberror " + std::to_string(run->internal.suberror);
      return e;
    case KVM_EXIT_FAIL_ENTRY:
      e.what += " hardware reason " + hex(run->fail_entry.hardware_entry_failure_reason);
      return e;
    case KVM_EXIT_MMIO:
      e.what += " at " + hex(run->mmio.phys_addr) + " (outside the guest's RAM)";
      return e;
    default:
      return e;
  }
}

#if defined(__x86_64__)

namespace {

// Size of the KVM system fd's per-vCPU mapping we accept: a kernel answering more than this is
// not one we understand (Linux 6.x: 3 pages on x86).
constexpr long kMaxRunArea = 1 << 20;
// Where QEMU puts the TSS that Intel's real-mode emulation needs (3 pages below the BIOS).
constexpr unsigned long kTssAddress = 0xfffbd000;

// Closes a mapping through the seam on every return path.
class SeamMap {
 public:
  SeamMap(DeviceIo& io, void* p, std::size_t n) : io_(io), p_(p), n_(n) {}
  ~SeamMap() { io_.unmap(p_, n_); }
  SeamMap(const SeamMap&) = delete;
  SeamMap& operator=(const SeamMap&) = delete;

 private:
  DeviceIo& io_;
  void* p_;
  std::size_t n_;
};

void* arg(unsigned long v) {
  return reinterpret_cast<void*>(static_cast<std::uintptr_t>(v));
}

// The vCPU's registers for the image's entry: real mode, CS:IP = 0000:7c00, interrupts off.
Result<void> enterAtLoadAddress(DeviceIo& io, int vcpu, std::string& step) {
  kvm_sregs sregs{};
  step = "KVM_GET_SREGS";
  if (auto rc = io.ioctl(vcpu, KVM_GET_SREGS, &sregs); !rc) return rc.error();
  // The reset state has CS base 0xffff0000 (the reset vector); a boot sector runs at base 0.
  sregs.cs.selector = 0;
  sregs.cs.base = 0;
  step = "KVM_SET_SREGS";
  if (auto rc = io.ioctl(vcpu, KVM_SET_SREGS, &sregs); !rc) return rc.error();
  kvm_regs regs{};
  regs.rip = kGuestLoadAddress;
  regs.rflags = 0x2;  // bit 1 is reserved and always set
  step = "KVM_SET_REGS";
  if (auto rc = io.ioctl(vcpu, KVM_SET_REGS, &regs); !rc) return rc.error();
  return {};
}

// KVM_RUN until the guest halts, stops, or misbehaves, or the deadline passes.
void runLoop(DeviceIo& io, int vcpu, const void* area, std::size_t area_size,
             const GuestLimits& limits, GuestRun& out) {
  const auto deadline = std::chrono::steady_clock::now() + limits.run;
  for (int attempt = 0; attempt < 2 * limits.max_exits; ++attempt) {
    auto rc = io.runVcpu(vcpu, deadline);
    if (!rc) {
      if (rc.error().code == EINTR) continue;  // not our deadline: run on
      if (rc.error().code == ETIMEDOUT) {
        out.timed_out = true;
      } else {
        out.failed_step = "KVM_RUN";
        out.error = rc.error();
      }
      return;
    }
    ++out.exits;
    out.last = decodeGuestExit(area, area_size);
    if (out.last.kind == GuestExit::Kind::Halt) {
      out.halted = true;
      return;
    }
    if (out.last.kind != GuestExit::Kind::Stage) {
      out.unexpected = out.last.what;
      return;
    }
    if (out.last.stage != static_cast<int>(out.reached) + 1) {
      out.unexpected = "stage " + std::to_string(out.last.stage) + " reported after stage " +
                       std::to_string(static_cast<int>(out.reached));
      return;
    }
    out.reached = static_cast<GuestStage>(out.last.stage);
    if (out.exits >= limits.max_exits) break;
  }
  out.unexpected = "more than " + std::to_string(limits.max_exits) + " exits";
}

}  // namespace

GuestRun runGuest(DeviceIo& io, int kvm_fd, int vm_fd, std::span<const std::uint8_t> image,
                  GuestLimits limits) {
  GuestRun out;
  out.limit = limits.run;
  auto failed = [&](std::string step, Error e) {
    out.failed_step = std::move(step);
    out.error = std::move(e);
    return out;
  };
  if (image.empty() || image.size() > kGuestMemoryBytes - kGuestLoadAddress)
    return failed("load the guest", Error{EINVAL, "the guest image does not fit below 32 KiB"});
  if (auto rc = io.ioctl(vm_fd, KVM_SET_TSS_ADDR, arg(kTssAddress)); !rc)
    return failed("KVM_SET_TSS_ADDR", rc.error());

  auto mem = io.map(-1, kGuestMemoryBytes);
  if (!mem) return failed("map the guest's memory", mem.error());
  SeamMap mem_guard(io, *mem, kGuestMemoryBytes);
  std::memcpy(static_cast<std::uint8_t*>(*mem) + kGuestLoadAddress, image.data(), image.size());
  kvm_userspace_memory_region region{};
  region.slot = 0;
  region.guest_phys_addr = 0;
  region.memory_size = kGuestMemoryBytes;
  region.userspace_addr = reinterpret_cast<std::uintptr_t>(*mem);
  if (auto rc = io.ioctl(vm_fd, KVM_SET_USER_MEMORY_REGION, &region); !rc)
    return failed("KVM_SET_USER_MEMORY_REGION", rc.error());

  auto area_size = io.ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, nullptr);
  if (!area_size) return failed("KVM_GET_VCPU_MMAP_SIZE", area_size.error());
  if (*area_size < static_cast<long>(sizeof(kvm_run)) || *area_size > kMaxRunArea)
    return failed("KVM_GET_VCPU_MMAP_SIZE",
                  Error{EINVAL, "a vcpu mapping of " + std::to_string(*area_size) + " bytes"});
  auto vcpu = io.ioctl(vm_fd, KVM_CREATE_VCPU, arg(0));
  if (!vcpu) return failed("KVM_CREATE_VCPU", vcpu.error());
  SeamFd vcpu_guard(io, *vcpu);
  const auto size = static_cast<std::size_t>(*area_size);
  auto area = io.map(*vcpu, size);
  if (!area) return failed("map the vcpu's kvm_run area", area.error());
  SeamMap area_guard(io, *area, size);

  std::string step;
  if (auto rc = enterAtLoadAddress(io, *vcpu, step); !rc) return failed(step, rc.error());
  runLoop(io, *vcpu, *area, size, limits, out);
  kvm_sregs sregs{};
  if (io.ioctl(*vcpu, KVM_GET_SREGS, &sregs))
    out.registers = GuestRegisters{sregs.cr0, sregs.cr3, sregs.cr4, sregs.efer};
  return out;
}

#else

GuestRun runGuest(DeviceIo&, int, int, std::span<const std::uint8_t>, GuestLimits) {
  GuestRun out;
  out.supported = false;  // the guest is x86 machine code; no other architecture has one yet
  return out;
}

#endif

}  // namespace nodegate
