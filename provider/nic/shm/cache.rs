//! Which last-level cache this process runs under, so that a sender can
//! tell whether its peer shares it.
//!
//! Copying a message through the mailbox costs two copies, a pull with
//! `process_vm_readv` one copy and a system call or two. Between cores
//! that share a last-level cache the two copies stay in that cache and
//! win up to about 64 KiB (48 KiB: 1.7 µs against 4.4 pulled, 64 KiB 2.2
//! against 5.5, `fi_pingpong` on the VM measured); between cores that
//! share none, every line crosses to the other cache and the pull wins
//! from about 16 KiB (8.3 µs against 4.5 on another VM). So a ring owner
//! publishes its cache in its mailbox header (`Mailbox::init`) and a
//! sender spans more slots only when the cache is its own (`port.rs`).
//!
//! The cache map only bounds the span: within it, what copies and pulls
//! are measured to cost chooses (`choice.rs`; on a third VM, whose two
//! cores report one L3, two copies of 64 KiB took 8.5 µs against a 3.7 µs
//! pull).
//!
//! A process knows its cache only when every CPU it may run on is under
//! the same one (bound to a core, or to a core complex, as MPI launchers
//! bind their ranks; or on a host with a single last-level cache): the
//! cache is then named by the lowest CPU that shares it, plus one. 0: not
//! known (the process may run under several, or sysfs does not say).
//! `FI_GNIX_SHM_CACHE` names one instead (or none, with 0).

use std::path::Path;
use std::sync::OnceLock;

/// Slots a message may span to a peer not known to be under our cache
/// (at most `FI_GNIX_SHM_SPAN`): 32976 bytes of 8 KiB slots.
pub const FAR_SPAN: usize = 4;

/// Slots a message may span into a ring of `span` whose owner is `near`
/// (under our cache) or not.
pub fn span_to(span: usize, near: bool) -> usize {
    if near {
        span
    } else {
        span.min(FAR_SPAN)
    }
}

/// This process's last-level cache, as `cache_of` names it, worked out
/// once.
pub fn this_process() -> u32 {
    static CACHE: OnceLock<u32> = OnceLock::new();
    *CACHE.get_or_init(|| {
        // FI_GNIX_SHM_CACHE: a name given, or -1 to work it out.
        if let Ok(named) = u32::try_from(crate::params::params().shm_cache) {
            return named;
        }
        let Ok(set) = rustix::thread::sched_getaffinity(None) else {
            return 0;
        };
        let cpus = (0..rustix::thread::CpuSet::MAX_CPU).filter(|&c| set.is_set(c));
        cache_of(Path::new("/sys/devices/system/cpu"), cpus)
    })
}

/// The last-level cache every one of `cpus` is under (sysfs at `root`):
/// its lowest CPU plus one, or 0 if they are not all under one or sysfs
/// does not say. One CPU's cache is read; the others are looked up in its
/// list of CPUs (a host of hundreds reads one CPU's few files, not all of theirs).
pub fn cache_of(root: &Path, cpus: impl Iterator<Item = usize>) -> u32 {
    let mut cpus = cpus.peekable();
    let Some(&first) = cpus.peek() else {
        return 0;
    };
    let Some(shared) = llc_cpus(root, first) else {
        return 0;
    };
    let under = |c: usize| shared.iter().any(|&(lo, hi)| (lo..=hi).contains(&c));
    match shared.iter().map(|&(lo, _)| lo).min() {
        Some(lowest) if cpus.all(under) => u32::try_from(lowest).map_or(0, |l| l.saturating_add(1)),
        _ => 0,
    }
}

/// The CPUs sharing `cpu`'s highest-level cache, as ranges
/// (`cpuN/cache/indexK/{level,shared_cpu_list}`; a list reads "0-7,64-71").
fn llc_cpus(root: &Path, cpu: usize) -> Option<Vec<(usize, usize)>> {
    let dir = root.join(format!("cpu{cpu}/cache"));
    let mut best: Option<(u32, Vec<(usize, usize)>)> = None;
    for e in std::fs::read_dir(dir).ok()?.flatten() {
        if !e.file_name().to_string_lossy().starts_with("index") {
            continue;
        }
        let read = |f: &str| std::fs::read_to_string(e.path().join(f)).ok();
        let Some(level) = read("level").and_then(|l| l.trim().parse::<u32>().ok()) else {
            continue;
        };
        if best.as_ref().is_some_and(|(l, _)| level <= *l) {
            continue;
        }
        let Some(list) = read("shared_cpu_list").and_then(|l| parse_cpu_list(l.trim())) else {
            continue;
        };
        best = Some((level, list));
    }
    best.map(|(_, list)| list)
}

/// "0-7,64-71" as ranges; None if any part is not a number or a range.
fn parse_cpu_list(s: &str) -> Option<Vec<(usize, usize)>> {
    s.split(',')
        .map(|part| match part.split_once('-') {
            Some((lo, hi)) => Some((lo.parse().ok()?, hi.parse().ok()?)),
            None => part.parse().ok().map(|c| (c, c)),
        })
        .collect::<Option<Vec<_>>>()
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A sysfs tree of `cpus` CPUs whose L3 is shared by groups of
    /// `per_l3` (and an L2 of their own).
    fn host(dir: &Path, cpus: usize, per_l3: usize) {
        for c in 0..cpus {
            let l3 = c / per_l3 * per_l3;
            for (i, level, list) in [
                (0, 1, format!("{c}")),
                (2, 2, format!("{c}")),
                (3, 3, format!("{}-{}", l3, l3 + per_l3 - 1)),
            ] {
                let d = dir.join(format!("cpu{c}/cache/index{i}"));
                fs::create_dir_all(&d).unwrap();
                fs::write(d.join("level"), format!("{level}\n")).unwrap();
                fs::write(d.join("shared_cpu_list"), format!("{list}\n")).unwrap();
            }
        }
    }

    #[test]
    fn cpus_under_one_last_level_cache_name_it_and_others_do_not() {
        let dir = std::env::temp_dir().join(format!("gnix-cache-test-{}", std::process::id()));
        host(&dir, 8, 4);
        assert_eq!(cache_of(&dir, [1].into_iter()), 1, "one core: its L3 (CPUs 0-3)");
        assert_eq!(
            cache_of(&dir, [5, 6].into_iter()),
            5,
            "two cores of the second L3 (CPUs 4-7)"
        );
        assert_eq!(cache_of(&dir, [3, 4].into_iter()), 0, "across two L3s: not known");
        assert_eq!(cache_of(&dir, [9].into_iter()), 0, "a CPU sysfs does not know");
        assert_eq!(cache_of(&dir, std::iter::empty()), 0);
        assert_eq!(parse_cpu_list("0-7,64-71"), Some(vec![(0, 7), (64, 71)]));
        assert_eq!(parse_cpu_list("3"), Some(vec![(3, 3)]));
        assert_eq!(parse_cpu_list("0-x"), None);
        fs::remove_dir_all(&dir).unwrap();
    }
}
