//! What /proc says about a process: open file descriptors, threads, RSS.

/// Open file descriptors of `pid` (entries of /proc/<pid>/fd).
pub fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read /proc/<pid>/fd")
        .count()
}

/// A field of /proc/<pid>/status, its first number (e.g. `Threads`, `VmRSS` in kB).
pub fn status_field(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Threads of `pid`.
pub fn threads(pid: u32) -> u64 {
    status_field(pid, "Threads")
}

/// Resident set size of `pid` in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    status_field(pid, "VmRSS")
}
