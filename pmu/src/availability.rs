//! Can this process read hardware counters at all? One `perf_event_open` of
//! the CPU-cycles counter on this process answers it, and on failure the
//! errno plus `/proc/sys/kernel/perf_event_paranoid` say why, so `tiletune
//! probe` can tell the user what to change (or that it is a VM without a
//! PMU, where wall-clock timing is all there is).

use serde::{Deserialize, Serialize};

/// The answer of [`hardware_counters`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PmuAvailability {
    /// A cycles counter could be opened for this process.
    pub available: bool,
    /// The `perf_event_open` errno when it could not.
    pub errno: Option<i32>,
    /// One line for the user: what happened and what to do.
    pub reason: String,
}

/// `struct perf_event_attr` up to `sig_data` (`PERF_ATTR_SIZE_VER7`, 128
/// bytes), from `include/uapi/linux/perf_event.h`. The kernel accepts any
/// published size and zero-fills the rest; only the fields set below matter.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    kind: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// The bitfield word: bit 0 `disabled`, bit 5 `exclude_kernel`, bit 6 `exclude_hv`.
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
    config2: u64,
    branch_sample_type: u64,
    sample_regs_user: u64,
    sample_stack_user: u32,
    clockid: i32,
    sample_regs_intr: u64,
    aux_watermark: u32,
    sample_max_stack: u16,
    reserved_2: u16,
    aux_sample_size: u32,
    reserved_3: u32,
    sig_data: u64,
}

const PERF_ATTR_SIZE_VER7: u32 = 128;
const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == PERF_ATTR_SIZE_VER7 as usize);

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const FLAG_DISABLED: u64 = 1 << 0;
const FLAG_EXCLUDE_KERNEL: u64 = 1 << 5;
const FLAG_EXCLUDE_HV: u64 = 1 << 6;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;

/// Opens (disabled) and closes a user-space CPU-cycles counter on this
/// process, any CPU.
pub fn hardware_counters() -> PmuAvailability {
    let attr = PerfEventAttr {
        kind: PERF_TYPE_HARDWARE,
        size: PERF_ATTR_SIZE_VER7,
        config: PERF_COUNT_HW_CPU_CYCLES,
        flags: FLAG_DISABLED | FLAG_EXCLUDE_KERNEL | FLAG_EXCLUDE_HV,
        ..Default::default()
    };
    // SAFETY: `attr` is a valid, fully initialized perf_event_attr of the size
    // it declares and outlives the call; pid 0 / cpu -1 / group -1 are plain values.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            0 as libc::pid_t,
            -1 as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd >= 0 {
        // SAFETY: the kernel just returned this descriptor to us and nothing else owns it.
        unsafe { libc::close(fd as libc::c_int) };
        return PmuAvailability {
            available: true,
            errno: None,
            reason: "hardware cycle counter readable from user space".to_string(),
        };
    }
    let errno = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
    PmuAvailability {
        available: false,
        errno: Some(errno),
        reason: explain(errno, perf_event_paranoid()),
    }
}

/// `/proc/sys/kernel/perf_event_paranoid`, if readable.
pub fn perf_event_paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// The likely reason for a `perf_event_open` errno, given the paranoid level.
pub fn explain(errno: i32, paranoid: Option<i32>) -> String {
    let level = paranoid.map_or_else(|| "unknown".to_string(), |p| p.to_string());
    match errno {
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => format!(
            "no hardware PMU is exposed to this system (errno {errno}; typical in a VM or \
             container without PMU passthrough): benchmarks fall back to wall-clock time"
        ),
        libc::EACCES | libc::EPERM => match paranoid {
            Some(p) if p > 2 => format!(
                "perf_event_paranoid is {p}, which forbids unprivileged counters: run \
                 `sudo sysctl kernel.perf_event_paranoid=2` (or `adb shell setprop \
                 security.perf_harden 0` on Android)"
            ),
            _ => format!(
                "perf_event_open was refused (errno {errno}) although perf_event_paranoid \
                 is {level}: a seccomp profile (e.g. Docker's default) or missing \
                 CAP_PERFMON is blocking it; run outside the container or grant CAP_PERFMON"
            ),
        },
        libc::ENOSYS => "perf_event_open is not implemented here (kernel without \
                         CONFIG_PERF_EVENTS, or an emulator such as qemu-user that does \
                         not forward it): benchmarks fall back to wall-clock time"
            .to_string(),
        _ => format!(
            "perf_event_open failed: {} (perf_event_paranoid is {level})",
            std::io::Error::from_raw_os_error(errno)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_answers_consistently() {
        let a = hardware_counters();
        assert_eq!(a.available, a.errno.is_none());
        assert!(!a.reason.is_empty());
    }

    #[test]
    fn reasons_name_the_cause() {
        assert!(explain(libc::ENOENT, Some(2)).contains("no hardware PMU"));
        assert!(explain(libc::EOPNOTSUPP, None).contains("VM"));
        let high = explain(libc::EACCES, Some(3));
        assert!(high.contains("perf_event_paranoid is 3"), "{high}");
        assert!(high.contains("sysctl kernel.perf_event_paranoid=2"));
        assert!(explain(libc::EPERM, Some(1)).contains("seccomp"));
        assert!(explain(libc::ENOSYS, Some(2)).contains("qemu-user"));
        assert!(explain(libc::EINVAL, Some(2)).contains("perf_event_paranoid is 2"));
    }
}
