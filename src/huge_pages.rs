//! Huge pages for the memory the indexes were built in (Linux only).
//!
//! The indexes are read at random: a traversal visits nodes scattered over the graph, a
//! search reads vector codes and posting lists all over the heap. On 4 KiB pages each of
//! those reads can miss the TLB too, and in a virtual machine a page walk is itself several
//! memory reads. kbq turns transparent huge pages off for its allocator while it builds the
//! indexes ([`off_while_building`]); once they are built,
//! [`collapse_built_indexes`] turns them back on for the process and asks the kernel to
//! remap each 2 MiB stretch of the heap that is (nearly) all in use as one huge page
//! (`MADV_COLLAPSE`, Linux 6.1). Stretches with holes are left alone, so the memory held
//! grows by at most the few pages each collapsed stretch lacked.
//!
//! Only where the system's THP mode is `madvise` (the usual default): under `always`,
//! clearing the process's flag would hand the allocator huge pages for everything it maps
//! from then on, the cost the flag avoids; under `never` the administrator said no.

/// What [`collapse_built_indexes`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Collapsed {
    /// 2 MiB stretches remapped as huge pages.
    pub stretches: usize,
    /// Stretches dense enough that the kernel refused (e.g. no free huge page).
    pub refused: usize,
}

/// The least share of a stretch's 512 pages that must be in use for it to be collapsed:
/// a collapse fills the holes, and they would be memory the process did not hold before.
const DENSE_PAGES: usize = 496;

const PAGE: usize = 4096;
const STRETCH: usize = 2 << 20;

/// Turns transparent huge pages off for this process (called first in `main`), until
/// [`collapse_built_indexes`] turns them on again. kbq's allocator, mimalloc, gives freed
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

/// Collapses the dense stretches of the process's anonymous memory into huge pages, when
/// the system's THP mode is `madvise`. `None` when it did not try (another mode, not
/// Linux, or the kernel's files could not be read).
pub fn collapse_built_indexes() -> Option<Collapsed> {
    #[cfg(target_os = "linux")]
    {
        linux::collapse()
    }
    #[cfg(not(target_os = "linux"))]
    {
        None
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use std::fs::File;
    use std::io::{BufRead, BufReader};
    use std::os::unix::fs::FileExt;

    use super::{Collapsed, DENSE_PAGES, PAGE, STRETCH};

    /// `MADV_COLLAPSE` (Linux 6.1), spelled out for libc versions that lack it.
    const MADV_COLLAPSE: libc::c_int = 25;

    pub(super) fn collapse() -> Option<Collapsed> {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").ok()?;
        if !mode.contains("[madvise]") {
            return None;
        }
        // SAFETY: PR_SET_THP_DISABLE only clears a flag of this process; its further
        // arguments must be zero. mimalloc is built without its own huge-page requests
        // (`no_thp`), so under `madvise` nothing else maps huge pages after this.
        unsafe {
            libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
        }
        let pagemap = File::open("/proc/self/pagemap").ok()?;
        let mut done = Collapsed::default();
        let mut bytes = vec![0u8; STRETCH / PAGE * 8];
        for (start, end) in anonymous_regions()? {
            let mut at = start.next_multiple_of(STRETCH);
            while at + STRETCH <= end {
                // One 8-byte entry per page; bit 63: present in memory.
                if pagemap
                    .read_exact_at(&mut bytes, (at / PAGE * 8) as u64)
                    .is_err()
                {
                    break;
                }
                let in_use = bytes
                    .chunks_exact(8)
                    .filter(|e| u64::from_ne_bytes((*e).try_into().expect("8 bytes")) >> 63 == 1)
                    .count();
                if in_use >= DENSE_PAGES {
                    // SAFETY: the stretch lies inside a mapping of this process; a collapse
                    // keeps every page's contents (it copies them into the huge page).
                    let r =
                        unsafe { libc::madvise(at as *mut libc::c_void, STRETCH, MADV_COLLAPSE) };
                    if r == 0 {
                        done.stretches += 1;
                    } else {
                        done.refused += 1;
                    }
                }
                at += STRETCH;
            }
        }
        Some(done)
    }

    /// The private, writable, anonymous mappings of the process (the heap and the
    /// allocator's arenas), as address ranges; `None` when `/proc/self/maps` cannot be read.
    fn anonymous_regions() -> Option<Vec<(usize, usize)>> {
        let maps = BufReader::new(File::open("/proc/self/maps").ok()?);
        let mut regions = Vec::new();
        for line in maps.lines() {
            let line = line.ok()?;
            let mut fields = line.split_whitespace();
            let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
                continue;
            };
            // offset, device, inode, then the path: none for anonymous memory.
            let path = fields.nth(3);
            if !perms.starts_with("rw") || !perms.ends_with('p') {
                continue;
            }
            if path.is_some_and(|p| p != "[heap]") {
                continue;
            }
            let Some((a, b)) = address_range(range) else {
                continue;
            };
            if b - a >= STRETCH {
                regions.push((a, b));
            }
        }
        Some(regions)
    }

    /// The addresses of a `/proc/self/maps` (or `smaps`) range, `start-end` in hexadecimal.
    pub(super) fn address_range(range: &str) -> Option<(usize, usize)> {
        let (a, b) = range.split_once('-')?;
        Some((
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        ))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// The AnonHugePages (kB) of the mapping that holds `addr`, from /proc/self/smaps.
    fn huge_kb_at(addr: usize) -> u64 {
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().unwrap_or("");
            if let Some((a, b)) = linux::address_range(range) {
                inside = a <= addr && addr < b;
            } else if inside && line.starts_with("AnonHugePages:") {
                return line.split_whitespace().nth(1).unwrap().parse().unwrap();
            }
        }
        0
    }

    /// A buffer in use over several 2 MiB stretches ends on huge pages with every byte as
    /// it was, where the system's mode is `madvise` and the kernel has `MADV_COLLAPSE`;
    /// under another mode nothing is tried.
    #[test]
    fn dense_memory_is_remapped_on_huge_pages_with_its_contents() {
        let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .unwrap_or_default();
        off_while_building();
        let buffer: Vec<u32> = (0..(12 << 20) / 4).map(|i| i ^ 0x5bd1_e995).collect();
        let middle = buffer.as_ptr() as usize + buffer.len() * 2;
        assert_eq!(huge_kb_at(middle), 0, "huge pages while they are off");
        let done = collapse_built_indexes();
        if !mode.contains("[madvise]") {
            assert_eq!(done, None);
            return;
        }
        let done = done.expect("tried under madvise");
        // The buffer covers at least four whole stretches, all in use.
        assert!(done.stretches + done.refused >= 4, "{done:?}");
        assert!(
            buffer
                .iter()
                .enumerate()
                .all(|(i, &x)| x == i as u32 ^ 0x5bd1_e995)
        );
        if done.refused == 0 {
            assert!(huge_kb_at(middle) >= 2048, "{done:?}");
        }
    }
}
