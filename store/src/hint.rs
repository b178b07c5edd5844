//! Hints to the processor: fetching memory that a loop will read a few steps later, so that
//! the cache misses of scattered reads (vectors by slot, graph nodes, names) overlap instead of
//! each waiting on the last.

/// A hint to fetch the cache line at `p`; nothing on processors without one.
#[inline(always)]
pub(crate) fn prefetch<T: ?Sized>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads no memory the program sees and cannot fault, whatever `p` is.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
