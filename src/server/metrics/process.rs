//! The Prometheus client libraries' standard process metrics, read from
//! `/proc/self` at each scrape and appended to the page (Linux; elsewhere
//! nothing is added):
//! `process_cpu_seconds_total`, `process_resident_memory_bytes`,
//! `process_virtual_memory_bytes`, `process_open_fds`, `process_max_fds`,
//! `process_start_time_seconds`.

use std::fmt::Write as _;

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on every
/// Linux architecture retryd builds for).
const TICKS_PER_SECOND: f64 = 100.0;

/// Appends the process metrics that can be read to `page`.
pub fn render(page: &mut String) {
    let stat = std::fs::read_to_string("/proc/self/stat").ok();
    // Fields after the command name (which may hold spaces), from field 3 on.
    let fields: Vec<&str> = stat
        .as_deref()
        .and_then(|s| s.rsplit_once(')'))
        .map(|(_, rest)| rest.split_whitespace().collect())
        .unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    if let (Some(utime), Some(stime)) = (field(14), field(15)) {
        family(
            page,
            "process_cpu_seconds_total",
            "counter",
            "Total user and system CPU time spent in seconds.",
            (utime + stime) / TICKS_PER_SECOND,
        );
    }
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map(|k| k * 1024.0)
    };
    if let Some(rss) = kib("VmRSS:") {
        family(
            page,
            "process_resident_memory_bytes",
            "gauge",
            "Resident memory size in bytes.",
            rss,
        );
    }
    if let Some(vm) = kib("VmSize:") {
        family(
            page,
            "process_virtual_memory_bytes",
            "gauge",
            "Virtual memory size in bytes.",
            vm,
        );
    }
    if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
        // One entry is the directory handle read_dir holds.
        let open = dir.count().saturating_sub(1);
        family(
            page,
            "process_open_fds",
            "gauge",
            "Number of open file descriptors.",
            open as f64,
        );
    }
    if let Some(max) = max_fds() {
        family(
            page,
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
            max,
        );
    }
    if let (Some(start), Some(boot)) = (field(22), boot_time()) {
        family(
            page,
            "process_start_time_seconds",
            "gauge",
            "Start time of the process since unix epoch in seconds.",
            boot + start / TICKS_PER_SECOND,
        );
    }
}

fn family(page: &mut String, name: &str, kind: &str, help: &str, value: f64) {
    let _ = write!(page, "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}\n\n");
}

fn max_fds() -> Option<f64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

fn boot_time() -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    stat.lines().find_map(|l| l.strip_prefix("btime "))?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    #[test]
    #[cfg(target_os = "linux")]
    fn renders_the_standard_families() {
        let mut page = String::new();
        super::render(&mut page);
        for name in [
            "process_cpu_seconds_total",
            "process_resident_memory_bytes",
            "process_open_fds",
            "process_start_time_seconds",
        ] {
            assert!(page.contains(&format!("# TYPE {name} ")), "{name} missing:\n{page}");
        }
    }
}
