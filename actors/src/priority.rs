//! Thread priorities. Under a load that saturates every core, the threads that answer HTTP
//! (probes included) and the graph lookup lane must not get the same share of the CPU as the
//! main runtime's threads, which run the slow classes of work (SurrealDB statements, RAG,
//! chats, writes, graph documents that wait on SurrealDB or a remote embedder): there are more
//! of those, and each runs longer. kbq lowers
//! the main runtime's threads by `server.main_runtime_nice` when they start, and the
//! ingestion runtime's by `ingest.nice` more (ingestion is background work: lookups go
//! first); the others keep the priority kbq was started with.
//!
//! A thread inherits the nice value of the thread that creates it, and an unprivileged process
//! cannot raise a priority back, so the HTTP workers and the lookup lane must be created by a
//! thread that was not lowered: the main thread, which runs `serve` (see `server::start`).

/// The nice value `nice` steps below the calling thread's (up to 19, the lowest). Computed
/// once on the thread that builds a runtime, so every thread of that runtime gets the same
/// value, whichever thread of it happens to create the next.
pub fn lowered_by(nice: u8) -> i32 {
    (current_nice() + i32::from(nice)).min(19)
}

/// Sets the calling thread's nice value to `target` when that lowers it; a thread already at
/// `target` or lower is left alone (raising a priority needs privileges). A refusal is logged
/// and otherwise ignored: it costs latency under load, not correctness.
pub fn set_current_thread(target: i32) {
    if current_nice() >= target {
        return;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid and setpriority take no pointers and change only this thread's
        // scheduling priority (on Linux, PRIO_PROCESS with a thread id acts on that thread).
        let failed = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, target) != 0
        };
        if failed {
            tracing::warn!(
                target,
                error = %std::io::Error::last_os_error(),
                "could not lower this thread's priority"
            );
        }
    }
}

/// Puts the calling thread in Linux's idle scheduling class (`SCHED_IDLE`), below every
/// thread of the normal class: one that wakes preempts it at once, where a niced thread that
/// holds a core runs out its slice first (a lookup's p99 during an ingest, docs/architecture.md,
/// "Mechanisms"). Lowering a thread's class needs no privileges; a refusal is logged and
/// otherwise ignored, as for [`set_current_thread`]. Elsewhere than Linux, nothing.
pub fn set_current_thread_idle() {
    #[cfg(target_os = "linux")]
    {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: `param` outlives the call, which reads it; pid 0 is the calling thread.
        let failed = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) != 0 };
        if failed {
            tracing::warn!(
                error = %std::io::Error::last_os_error(),
                "could not put this thread in the idle scheduling class"
            );
        }
    }
}

/// Whether the calling thread is in the idle scheduling class (Linux; false elsewhere).
pub fn in_idle_class() -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: takes no pointers; pid 0 is the calling thread.
        unsafe { libc::sched_getscheduler(0) == libc::SCHED_IDLE }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

/// The calling thread's nice value (Linux; 0 elsewhere).
pub fn current_nice() -> i32 {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: as above; getpriority reads only.
        unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
    }
    #[cfg(not(target_os = "linux"))]
    {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lowered_thread_keeps_its_niceness_and_others_do_not_see_it() {
        let before = current_nice();
        let target = lowered_by(5);
        assert_eq!(target, (before + 5).min(19));
        let (lowered, again) = std::thread::spawn(move || {
            set_current_thread(target);
            let lowered = current_nice();
            // A second call, or one from a thread that inherited the value, changes nothing.
            set_current_thread(target);
            (lowered, current_nice())
        })
        .join()
        .unwrap();
        if cfg!(target_os = "linux") {
            assert_eq!(lowered, target);
            assert_eq!(again, target);
        }
        assert_eq!(current_nice(), before, "only the calling thread is lowered");
        set_current_thread(before);
        assert_eq!(current_nice(), before);
    }
}
