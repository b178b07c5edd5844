//! Transparent huge pages off for the process (Linux only).
//!
//! kbq builds its indexes at start in many small allocations, and its allocator (mimalloc,
//! built with `no_thp`) gives freed pages back in small pieces. Where the kernel hands the
//! process huge pages, each piece given back splits a 2 MiB page and the next allocation
//! there clears it again. Remapping the built indexes on huge pages afterwards
//! (`MADV_COLLAPSE`) was tried and measured within the noise of the load benchmark, so the
//! flag stays off for the life of the process.

/// Turns transparent huge pages off for this process (called first in `main`). kbq's allocator, mimalloc, gives freed
/// pages back to the system in small pieces; on huge pages each piece given back splits a
/// 2 MiB page, and the next allocation there faults it in and clears it again: measured at
/// start on a 100,000-document store, a third of the CPU time went to clearing pages, and
/// the indexes were ready in 3.3 s instead of 2.1 s (docs/benchmarks.md, "Start-up and
/// memory").
pub fn off_while_building() {
    #[cfg(target_os = "linux")]
    // SAFETY: PR_SET_THP_DISABLE only sets a flag of this process that the kernel reads when
    // it maps memory; its three further arguments must be zero.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}
