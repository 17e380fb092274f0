//! The decision log never loses what it kept (issue 24, item 2), against
//! the real binary: a full disk (`/dev/full`) rotates nothing away; a
//! file-size limit reached mid-run (`RLIMIT_FSIZE` set on the server only,
//! through `prlimit`) leaves a log whose every line `retryd replay` reads;
//! a torn last line is a warning, not a failed replay; a FIFO is written to
//! and never rotated; lines written and lines dropped are counted apart.

mod grpc_support;

use std::io::Read as _;
use std::process::Command;
use std::time::Duration;

use grpc_support::{Server, TempDir, eventually, failure, sample};
use retryd::grpc::pb;

const DROPPED: &str = "retryd_decision_log_dropped_total";

/// Sends `batches` ClassifyBatch calls of 1 000 decisions.
async fn decide(server: &Server, batches: usize) -> f64 {
    let mut client = server.client().await;
    let batch = pb::ClassifyBatchRequest {
        failures: vec![failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write); 1000],
        locale: String::new(),
    };
    for _ in 0..batches {
        client.classify_batch(batch.clone()).await.expect("batch answered");
    }
    (batches * 1000) as f64
}

fn dropped(scrape: &str, reason: &str) -> f64 {
    sample(scrape, &format!("{DROPPED}{{reason=\"{reason}\"}}")).unwrap_or(0.0)
}

fn total_dropped(scrape: &str) -> f64 {
    [
        "queue_full",
        "disk_full",
        "file_too_large",
        "reader_stalled",
        "write_error",
    ]
    .iter()
    .map(|r| dropped(scrape, r))
    .sum()
}

/// The scrape once lines written plus lines dropped are `total`.
async fn every_decision_counted(server: &Server, total: f64) -> String {
    eventually(Duration::from_secs(20), "every decision counted", || async {
        let s = server.scrape();
        let lines = sample(&s, "retryd_decision_log_lines_total")?;
        (lines + total_dropped(&s) == total).then_some(s)
    })
    .await
}

/// `retryd replay LOG --policy embedded`: exit code, JSON report, stderr.
fn replay(log: &std::path::Path) -> (Option<i32>, serde_json::Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_retryd"))
        .args([
            "replay",
            log.to_str().unwrap(),
            "--policy",
            "embedded",
            "--format",
            "json",
        ])
        .output()
        .expect("run retryd replay");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {err}"));
    (out.status.code(), json, err)
}

/// `ln -s /dev/full dlog; echo PRECIOUS > dlog.1`: nothing is rotated, both
/// kept files keep PRECIOUS, no line is counted as written, every decision
/// is counted as dropped because the disk is full.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_rotates_nothing_away_and_counts_drops_not_lines() {
    let dir = TempDir::new("dlog-full");
    let log = dir.join("dlog");
    std::os::unix::fs::symlink("/dev/full", &log).expect("symlink");
    for kept in ["dlog.1", "dlog.2"] {
        std::fs::write(dir.join(kept), "PRECIOUS\n").expect("kept file");
    }
    let server = Server::start(&[
        "--decision-log",
        log.to_str().unwrap(),
        "--decision-log-max-bytes",
        "1024",
        "--decision-log-keep",
        "2",
        "--decision-log-raw",
    ]);
    let total = decide(&server, 20).await;
    let scrape = every_decision_counted(&server, total).await;
    assert_eq!(
        sample(&scrape, "retryd_decision_log_lines_total"),
        Some(0.0),
        "{scrape}"
    );
    assert!(dropped(&scrape, "disk_full") > 0.0, "{scrape}");
    for kept in ["dlog.1", "dlog.2"] {
        assert_eq!(
            std::fs::read_to_string(dir.join(kept)).expect("kept"),
            "PRECIOUS\n",
            "{kept}"
        );
    }
    assert!(!dir.join("dlog.3").exists());
    assert_eq!(
        std::fs::read_link(&log).expect("still the link"),
        std::path::Path::new("/dev/full")
    );
}

/// `RLIMIT_FSIZE` on the server: writes fail with EFBIG part way through a
/// run (and part way through a line). The server keeps serving, the log
/// holds whole lines only, every one of them replays, and lines written
/// plus lines dropped add up to the decisions made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_size_limit_mid_run_leaves_a_log_whose_every_line_replays() {
    let dir = TempDir::new("dlog-fsize");
    let log = dir.join("decisions.jsonl");
    // 100 000 bytes: about 100 lines fit; the limit is far below the
    // rotation size, so the file meets it mid-run.
    let server = Server::start_under(
        &["prlimit", "--fsize=100000:100000", "--"],
        &[
            "--decision-log",
            log.to_str().unwrap(),
            "--decision-log-raw",
            "--decision-log-max-bytes",
            "10000000",
        ],
        &[],
    );
    let total = decide(&server, 5).await;
    let scrape = every_decision_counted(&server, total).await;
    let lines = sample(&scrape, "retryd_decision_log_lines_total").expect("lines");
    assert!(lines > 0.0 && dropped(&scrape, "file_too_large") > 0.0, "{scrape}");
    let text = std::fs::read(&log).expect("log");
    assert!(text.len() <= 100_000, "{} bytes", text.len());
    assert_eq!(text.last(), Some(&b'\n'), "the log ends with a whole line");
    let on_disk = text.iter().filter(|&&b| b == b'\n').count() as f64;
    assert_eq!(on_disk, lines, "lines_total counts what reached the disk");
    // Still serving after the limit.
    decide(&server, 1).await;
    let (code, report, err) = replay(&log);
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(report["decisions"].as_f64(), Some(on_disk), "{report}");

    // A torn last line (as a crash mid-write leaves): a warning, the rest replayed.
    let mut torn = text.clone();
    torn.extend_from_slice(br#"{"v":1,"ts":"2026-12-01T00:00:00Z","ts_ms":17"#);
    let torn_log = dir.join("torn.jsonl");
    std::fs::write(&torn_log, &torn).expect("torn log");
    let (code, report, err) = replay(&torn_log);
    assert_eq!(code, Some(0), "{report} {err}");
    assert_eq!(report["decisions"].as_f64(), Some(on_disk), "{report}");
    assert!(err.contains("warning") && err.contains("cut short"), "{err}");
    assert!(
        report["warnings"][0].as_str().is_some_and(|w| w.contains("cut short")),
        "{report}"
    );
}

/// A FIFO as `--decision-log`: written to, never rotated (a rotation would
/// replace it by a regular file), however small the rotation size.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fifo_is_written_to_and_never_rotated() {
    let dir = TempDir::new("dlog-fifo");
    let fifo = dir.join("dlog");
    let status = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(status.success());
    // The reader: opening a FIFO for reading waits for a writer, on its own thread.
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::fs::File::open(fifo).expect("open fifo").read_to_string(&mut text);
            text
        })
    };
    // The writer opens without waiting; give the reader a moment to be there.
    let server = eventually(Duration::from_secs(10), "the reader opened the FIFO", || async {
        std::thread::sleep(Duration::from_millis(100));
        Some(Server::start(&[
            "--decision-log",
            fifo.to_str().unwrap(),
            "--decision-log-max-bytes",
            "1024",
            "--decision-log-raw",
        ]))
    })
    .await;
    let total = decide(&server, 3).await;
    let scrape = every_decision_counted(&server, total).await;
    let lines = sample(&scrape, "retryd_decision_log_lines_total").expect("lines");
    assert!(lines > 0.0, "{scrape}");
    {
        use std::os::unix::fs::FileTypeExt as _;
        let t = std::fs::symlink_metadata(&fifo).expect("meta").file_type();
        assert!(t.is_fifo(), "the FIFO is still a FIFO");
    }
    assert!(!dir.join("dlog.1").exists(), "nothing rotated");
    server.terminate();
    let mut server = server;
    server.wait_exit().await;
    let text = reader.join().expect("reader");
    assert_eq!(text.lines().count() as f64, lines, "the reader got every line counted");
}
