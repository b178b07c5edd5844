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

/// A hint to fetch the cache line at `p` into the second-level cache only, for memory read
/// a while later: fetched into the first level (a few dozen kilobytes) that far ahead, it
/// would push out what is read before it.
#[inline(always)]
pub(crate) fn prefetch_far<T: ?Sized>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: as in `prefetch`.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T1 }>(p.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A hint to fetch every cache line (64 bytes) that `items` touch: the last one too when
/// they do not start a line.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(items: &[T]) {
    let bytes = std::mem::size_of_val(items);
    if bytes == 0 {
        return;
    }
    let skew = items.as_ptr() as usize % 64;
    let line = items.as_ptr().cast::<u8>().wrapping_sub(skew);
    for offset in (0..skew + bytes).step_by(64) {
        prefetch(line.wrapping_add(offset));
    }
}

/// `items` in order, with `fetch` called on each item `distance` places before the loop
/// reaches it (on the first `distance` at once), so that what it asks for is arriving by
/// then: the pattern of every loop here over scattered memory.
pub(crate) fn fetched_ahead<'a, T>(
    items: &'a [T],
    distance: usize,
    fetch: impl Fn(&'a T) + 'a,
) -> impl Iterator<Item = &'a T> + 'a {
    items.iter().take(distance).for_each(&fetch);
    items.iter().enumerate().map(move |(i, item)| {
        if let Some(ahead) = items.get(i + distance) {
            fetch(ahead);
        }
        item
    })
}
