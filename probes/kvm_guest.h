// The test guest of kvm-device: proof that KVM runs a guest, not only that it creates one.
//
// KVM_CREATE_VM succeeding says little: a paravirtual backend (kvm_pvm) creates VMs and runs
// real-mode code, yet no stock kernel boots on it. What every x86-64 kernel's boot needs is the
// chain of mode switches, so the guest makes exactly those, with its own ~220 bytes of machine
// code, and reports each stage by writing its number to I/O port 0xe9 (a KVM_EXIT_IO per stage):
//   1 real mode      2 protected mode (lgdt, CR0.PE, far jump to a 32-bit segment)
//   3 CR4.PAE and CR3 loaded with identity page tables it built itself
//   4 EFER read (rdmsr)   5 EFER.LME set (wrmsr)   6 paging on (CR0.PG): IA-32e mode
//   7 64-bit long mode (far jump to a 64-bit segment; the 7 is computed with 64-bit arithmetic)
// and halts (KVM_EXIT_HLT). Only 7 followed by hlt is a guest that entered long mode.
//
// The image is entered in real mode at 0000:7c00 with interrupts off, the state a PC BIOS hands
// a boot sector, so the same bytes boot under QEMU (test/probes/kvm_guest_peer_test.cpp runs
// them under TCG: stages 1-7 on a correct x86-64). runGuest() is self-contained over the DeviceIo
// seam so the privileged device helper can run it as well as the kvm-device probe.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "nodegate/result.h"
#include "nodegate/seams.h"

namespace nodegate {

enum class GuestStage : int {
  None = 0,
  RealMode,
  ProtectedMode,
  PaeAndCr3,
  EferRead,
  EferLme,
  Paging,
  LongMode,
};
inline constexpr int kGuestStages = 7;

// "real mode", "protected mode", ... "64-bit long mode"; "no instruction" for None.
std::string_view guestStageName(GuestStage s);
// What the guest does right after stage s: where a guest that stopped at s failed.
std::string_view guestNextStep(GuestStage s);

inline constexpr std::uint64_t kGuestLoadAddress = 0x7c00;
inline constexpr std::uint64_t kGuestMemoryBytes = 0x8000;  // page tables at 0x1000-0x3fff
inline constexpr std::uint16_t kGuestPort = 0xe9;           // QEMU's debugcon port as well

// The built-in image (x86 machine code, loaded at kGuestLoadAddress).
std::span<const std::uint8_t> builtinGuest();

// One KVM_RUN exit as the guest protocol reads it. Pure over the vCPU's kvm_run area (the
// bytes the kernel maps at the vCPU fd); a field pointing outside the area is Other, not a read.
struct GuestExit {
  enum class Kind { Stage, Halt, Other };
  Kind kind = Kind::Other;
  int stage = 0;             // Kind::Stage: the value written to kGuestPort
  std::uint32_t reason = 0;  // KVM_EXIT_*
  std::string what;          // "KVM_EXIT_SHUTDOWN (triple fault)", "KVM_EXIT_IO in port 0x80"...
};
GuestExit decodeGuestExit(const void* run_area, std::size_t size);

// The control registers after the run, for evidence.
struct GuestRegisters {
  std::uint64_t cr0 = 0, cr3 = 0, cr4 = 0, efer = 0;
};

struct GuestRun {
  bool supported = true;  // false: this build has no guest for the host's architecture
  GuestStage reached = GuestStage::None;
  bool halted = false;     // hlt after the last stage reached
  bool timed_out = false;  // the deadline cut the run short
  int exits = 0;           // KVM_RUN exits seen
  GuestExit last;          // the exit that ended the run (valid when exits > 0)
  std::string unexpected;  // why the run stopped, when not at hlt, a timeout or an error
  // A set-up step or KVM_RUN itself failed: which ("KVM_CREATE_VCPU") and why.
  std::string failed_step;
  Error error;
  std::optional<GuestRegisters> registers;
  std::chrono::milliseconds limit{0};  // the run's deadline, for messages
  // Proved: the guest reported every stage in order and halted in long mode.
  bool enteredLongMode() const { return halted && reached == GuestStage::LongMode; }
};

struct GuestLimits {
  // Wall time for the whole run, set-up excluded. The guest needs well under a millisecond;
  // the margin is for a loaded host.
  std::chrono::milliseconds run{50};
  int max_exits = 32;  // the guest makes 8; more means it is not the guest we wrote
};

// Runs image on vCPU 0 of vm_fd (a fresh VM from KVM_CREATE_VM on kvm_fd). Every fd and mapping
// it makes is released before it returns; vm_fd stays the caller's. Never throws.
GuestRun runGuest(DeviceIo& io, int kvm_fd, int vm_fd,
                  std::span<const std::uint8_t> image = builtinGuest(), GuestLimits limits = {});

}  // namespace nodegate
