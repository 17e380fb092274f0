//! End-to-end: `retryd serve --policy`, ListCatalogs, and hot reload (file
//! edits, SIGHUP, a broken policy, a Kubernetes ConfigMap symlink swap) with
//! clients calling Classify throughout — none of their calls may fail, and
//! each must be decided wholly by the old or wholly by the new policy.

mod grpc_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use grpc_support::{Load, Server, TempDir, eventually, reflect, sample, serve_expecting_exit};
use retryd::grpc::pb;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;

/// How long a reload may take to show (debounce included).
const RELOAD_WITHIN: Duration = Duration::from_secs(10);
/// Client tasks calling Classify during a reload.
const CLIENTS: usize = 3;
/// Calls the load makes before a change and after it took effect.
const CALLS_BETWEEN: u64 = 100;

/// A small valid catalog named `name`; `max_attempts` varies its content.
fn catalog(name: &str, max_attempts: u32) -> String {
    format!(
        r#"name = "{name}"
description = "a test catalog"
locales = ["en", "ru"]
max_attempts = {max_attempts}
[backoff]
base_ms = 100
multiplier = 2.0
cap_ms = 1000
[operations]
read = ["get"]
write = ["add"]
[[codes]]
code = "A"
aliases = ["A-1"]
target_reached = "unknown"
delay = "retry_after"
condition = {{ en = "a", ru = "а" }}
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "state_verification_required" }}
retried_write = {{ verdict = "do_not_retry", reconciliation_action = "manual_review" }}
[unknown]
target_reached = "unknown"
condition = {{ en = "u", ru = "у" }}
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "state_verification_required" }}
[no_envelope]
target_reached = "unknown"
condition = {{ en = "n", ru = "н" }}
read = {{ verdict = "retry_with_limit" }}
write = {{ verdict = "state_verification_required" }}
"#
    )
}

/// The version the server should report for `paths` (computed in-process
/// by the same loader).
fn version_of(paths: &[&Path]) -> String {
    let paths: Vec<PathBuf> = paths.iter().map(|p| p.to_path_buf()).collect();
    retryd::load::load_policy(&paths, "vibecode")
        .expect("test policy loads")
        .version()
        .to_owned()
}

/// Replaces a file atomically (write a hidden temp file, rename over).
fn replace_file(path: &Path, text: &str) {
    let tmp = path.with_file_name(format!(
        ".{}.tmp",
        path.file_name().and_then(|n| n.to_str()).expect("file name")
    ));
    std::fs::write(&tmp, text).expect("write temp file");
    std::fs::rename(&tmp, path).expect("rename over");
}

fn classify_mine() -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(pb::Failure {
            catalog: "mine".into(),
            code: "A".into(),
            operation: pb::OperationKind::Write as i32,
            attempt: 1,
            ..Default::default()
        })),
        locale: String::new(),
    }
}

async fn decide(server: &Server, req: pb::ClassifyRequest) -> pb::Decision {
    *server
        .client()
        .await
        .classify(req)
        .await
        .expect("Classify")
        .into_inner()
        .decision
        .expect("decision")
}

/// Waits until Classify answers from policy `version`.
async fn until_version(server: &Server, version: &str) {
    let mut client = server.client().await;
    eventually(RELOAD_WITHIN, &format!("policy {version} decides"), || {
        let mut client = client.clone();
        async move {
            let d = client.classify(classify_mine()).await.ok()?.into_inner().decision?;
            (d.policy_version == version).then_some(())
        }
    })
    .await;
    // One more call on the kept client, so its connection is exercised too.
    let d = client.classify(classify_mine()).await.expect("Classify").into_inner();
    assert_eq!(d.decision.expect("decision").policy_version, version);
}

async fn serving(server: &Server) -> bool {
    let mut health = HealthClient::new(server.channel().await);
    let status = health
        .check(HealthCheckRequest {
            service: "retryd.v1.RetryDecisionService".into(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status;
    status == ServingStatus::Serving as i32
}

/// Serves `--policy policy` (plus `extra` flags) under a Classify load of
/// the `mine` catalog, once the policy's version is deciding; returns that
/// version.
async fn serve_under_load(policy: &Path, extra: &[&str]) -> (String, Server, Load) {
    let v1 = version_of(&[policy]);
    let mut args = vec!["--policy", policy.to_str().expect("utf-8")];
    args.extend_from_slice(extra);
    let server = Server::start(&args);
    let load = Load::start(&server, CLIENTS, classify_mine()).await;
    until_version(&server, &v1).await;
    load.more_calls(CALLS_BETWEEN).await;
    (v1, server, load)
}

fn info_series(version: &str) -> String {
    format!("retryd_policy_info{{version=\"{version}\"}}")
}

#[tokio::test]
async fn user_catalog_decides_and_is_listed() {
    let dir = TempDir::new("listed");
    std::fs::write(dir.join("mine.toml"), catalog("mine", 3)).expect("write");
    let version = version_of(&[&dir.0]);
    let server = Server::start(&["--policy", dir.as_str()]);

    let d = decide(&server, classify_mine()).await;
    assert_eq!(d.catalog, "mine");
    assert_eq!(d.rule, "mine/A/write");
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired);
    assert_eq!(d.retry.as_ref().expect("retry").max_attempts, 3);
    assert_eq!(d.policy_version, version);
    assert!(
        server.log().contains(&version),
        "the version is logged at start:\n{}",
        server.log()
    );

    let list = server
        .client()
        .await
        .list_catalogs(pb::ListCatalogsRequest { locale: "ru".into() })
        .await
        .expect("ListCatalogs")
        .into_inner();
    assert_eq!(list.policy_version, version);
    assert_eq!(list.default_catalog, "vibecode");
    let names: Vec<&str> = list.catalogs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names, ["vibecode", "asc", "frontspin", "grpc", "http", "mine"]);
    for c in &list.catalogs {
        assert!(!c.codes.is_empty(), "{} lists its codes", c.name);
        assert!(
            c.unknown.is_some() && c.no_envelope.is_some(),
            "{} has its fallbacks",
            c.name
        );
        assert!(c.backoff.is_some());
    }
    let vibecode = &list.catalogs[0];
    let timeout = vibecode
        .codes
        .iter()
        .find(|c| c.code == "BITRIX_TIMEOUT")
        .expect("BITRIX_TIMEOUT listed");
    assert_eq!(timeout.read_verdict(), pb::Verdict::RetryWithLimit);
    assert_eq!(timeout.write_verdict(), pb::Verdict::StateVerificationRequired);
    assert_eq!(timeout.target_reached(), pb::TargetReached::Yes);

    let mine = &list.catalogs[5];
    assert_eq!(mine.max_attempts, 3);
    assert_eq!(mine.locales, ["en", "ru"]);
    assert_eq!(mine.read_words, ["get"]);
    let a = &mine.codes[0];
    assert_eq!((a.code.as_str(), a.aliases.as_slice()), ("A", &["A-1".to_owned()][..]));
    assert_eq!(a.delay, "retry_after");
    assert_eq!(a.condition, "а", "the condition is in the requested locale");
    assert_eq!(a.read_verdict(), pb::Verdict::RetryWithLimit);
    assert_eq!(a.write_verdict(), pb::Verdict::StateVerificationRequired);
    assert_eq!(a.retried_write_verdict, Some(pb::Verdict::DoNotRetry as i32));
    assert_eq!(a.write_with_retry_after_verdict, None);
    let retried = a.retried_write.as_ref().expect("retried_write rule");
    assert_eq!(retried.rule, "mine/A/retried_write");
    assert_eq!(retried.reconciliation_action, "manual_review");
    assert_eq!(mine.unknown.as_ref().expect("unknown").code, "unknown");

    let scrape = server.scrape();
    assert_eq!(sample(&scrape, &info_series(&version)), Some(1.0), "{scrape}");
    assert!(
        scrape.contains("grpc_method=\"ListCatalogs\""),
        "ListCatalogs is a known method in the call metrics:\n{scrape}"
    );
}

#[tokio::test]
async fn the_example_policies_serve() {
    let examples = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/policies");
    let server = Server::start(&["--policy", examples.to_str().expect("utf-8")]);
    let mut req = classify_mine();
    let f = req.failure.as_mut().expect("failure");
    f.catalog = "payments".into();
    f.code = "PG-504".into();
    let d = decide(&server, req.clone()).await;
    assert_eq!(d.rule, "payments/GATEWAY_TIMEOUT/write");
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired);

    let f = req.failure.as_mut().expect("failure");
    f.code = "PROCESSOR_UNAVAILABLE".into();
    f.retry_after = "30".into();
    let d = decide(&server, req).await;
    assert_eq!(d.rule, "payments/PROCESSOR_UNAVAILABLE/write_with_retry_after");
    assert_eq!(d.verdict(), pb::Verdict::RetryWithLimit);
    assert_eq!(d.retry.expect("retry").after_ms, 30_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_the_file_reloads_under_load() {
    let dir = TempDir::new("edit");
    let file = dir.join("mine.toml");
    std::fs::write(&file, catalog("mine", 3)).expect("write");
    let (v1, server, load) = serve_under_load(&dir.0, &[]).await;

    // An edit in place (truncate and write), as an editor or `cp` does it.
    std::fs::write(&file, catalog("mine", 2)).expect("edit");
    let v2 = version_of(&[&dir.0]);
    assert_ne!(v1, v2);
    until_version(&server, &v2).await;
    assert_eq!(
        decide(&server, classify_mine())
            .await
            .retry
            .expect("retry")
            .max_attempts,
        2
    );

    load.more_calls(CALLS_BETWEEN).await;
    let report = load.stop().await;
    report.assert_clean(&[&v1, &v2]);
    let scrape = server.scrape();
    assert!(
        sample(&scrape, "retryd_policy_reload_total{result=\"ok\"}") >= Some(1.0),
        "{scrape}"
    );
    assert_eq!(sample(&scrape, &info_series(&v2)), Some(1.0), "{scrape}");
    assert_eq!(sample(&scrape, &info_series(&v1)), Some(0.0), "{scrape}");
    // The new version is logged.
    server.until_logged(&["policy reload: applied", &v2]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_when_not_watching() {
    let dir = TempDir::new("sighup");
    let file = dir.join("mine.toml");
    std::fs::write(&file, catalog("mine", 3)).expect("write");
    // The file itself is given, its directory is not watched: only SIGHUP reloads.
    let (v1, server, load) = serve_under_load(&file, &["--policy-watch", "false"]).await;

    // SIGHUP with nothing changed: unchanged.
    server.hangup();
    eventually(RELOAD_WITHIN, "an unchanged reload is counted", || async {
        (sample(&server.scrape(), "retryd_policy_reload_total{result=\"unchanged\"}") >= Some(1.0)).then_some(())
    })
    .await;

    replace_file(&file, &catalog("mine", 2));
    let v2 = version_of(&[&file]);
    server.hangup();
    until_version(&server, &v2).await;

    load.more_calls(CALLS_BETWEEN).await;
    let report = load.stop().await;
    report.assert_clean(&[&v1, &v2]);
    let scrape = server.scrape();
    assert_eq!(
        sample(&scrape, "retryd_policy_reload_total{result=\"ok\"}"),
        Some(1.0),
        "{scrape}"
    );
}

/// The `policy reload: …` outcome lines logged so far.
fn outcomes(server: &Server) -> Vec<String> {
    server
        .log()
        .lines()
        .filter(|l| l.contains("policy reload: "))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_reload_logs_its_outcome_once_at_info() {
    let dir = TempDir::new("outcomes");
    let file = dir.join("mine.toml");
    std::fs::write(&file, catalog("mine", 3)).expect("write");
    let server = Server::start(&["--policy", file.to_str().unwrap(), "--policy-watch", "false"]);
    let v1 = version_of(&[&file]);
    until_version(&server, &v1).await;
    // The PID is logged at start, so SIGHUP can be sent to this server only.
    assert!(
        server.log().contains(&format!("pid={}", server.pid())),
        "{}",
        server.log()
    );
    let logged = |n: usize| {
        let server = &server;
        async move {
            eventually(RELOAD_WITHIN, "the reload's outcome is logged", || async {
                let lines = outcomes(server);
                (lines.len() >= n).then_some(lines)
            })
            .await
        }
    };

    // SIGHUP, nothing changed.
    server.hangup();
    let lines = logged(1).await;
    assert!(
        lines[0].contains("INFO") && lines[0].contains("policy reload: unchanged"),
        "{lines:#?}"
    );
    assert!(lines[0].contains(&v1), "{lines:#?}");

    // A broken edit: the errors, then one outcome line.
    replace_file(&file, "name = \"mine\"\nmax_attempts = [\n");
    server.hangup();
    let lines = logged(2).await;
    assert!(
        lines[1].contains("INFO") && lines[1].contains("policy reload: refused"),
        "{lines:#?}"
    );
    assert!(lines[1].contains(&v1), "the version that keeps serving: {lines:#?}");

    // Fixed back to the version in force: the recovery is said.
    replace_file(&file, &catalog("mine", 3));
    server.hangup();
    let lines = logged(3).await;
    assert!(
        lines[2].contains("INFO") && lines[2].contains("policy reload: unchanged; the files load again"),
        "{lines:#?}"
    );

    // A new version: applied, naming it.
    replace_file(&file, &catalog("mine", 2));
    let v2 = version_of(&[&file]);
    server.hangup();
    let lines = logged(4).await;
    assert!(
        lines[3].contains("INFO") && lines[3].contains(&format!("policy reload: applied {v2}")),
        "{lines:#?}"
    );

    // Once per reload: four SIGHUPs, four outcome lines.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(outcomes(&server).len(), 4, "{}", server.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_policy_is_refused_and_the_old_one_keeps_serving() {
    let dir = TempDir::new("broken");
    let file = dir.join("mine.toml");
    std::fs::write(&file, catalog("mine", 3)).expect("write");
    let (v1, server, load) = serve_under_load(&dir.0, &[]).await;

    // Invalid TOML, then a valid file with an invalid value: both refused.
    replace_file(&file, "name = \"mine\"\nmax_attempts = [\n");
    eventually(RELOAD_WITHIN, "a refused reload is counted", || async {
        (sample(&server.scrape(), "retryd_policy_reload_total{result=\"error\"}") >= Some(1.0)).then_some(())
    })
    .await;
    assert_eq!(decide(&server, classify_mine()).await.policy_version, v1);
    assert!(serving(&server).await, "health stays SERVING");
    let scrape = server.scrape();
    assert_eq!(
        sample(&scrape, "retryd_policy_last_reload_successful"),
        Some(0.0),
        "{scrape}"
    );
    assert_eq!(sample(&scrape, &info_series(&v1)), Some(1.0), "{scrape}");
    // The error names the file and line.
    server.until_logged(&["policy reload refused", "mine.toml:2:"]).await;

    replace_file(&file, &catalog("mine", 0));
    // Waits for this file's own error: one rename may be seen as several
    // changes, so the error count alone does not say which file was refused.
    server.until_logged(&["mine.toml:4: max_attempts"]).await;
    assert!(sample(&server.scrape(), "retryd_policy_reload_total{result=\"error\"}") >= Some(2.0));
    assert_eq!(decide(&server, classify_mine()).await.policy_version, v1);

    // Fixed: the next version takes over.
    replace_file(&file, &catalog("mine", 2));
    let v2 = version_of(&[&dir.0]);
    until_version(&server, &v2).await;
    assert!(serving(&server).await);
    assert_eq!(
        sample(&server.scrape(), "retryd_policy_last_reload_successful"),
        Some(1.0)
    );

    load.more_calls(CALLS_BETWEEN).await;
    let report = load.stop().await;
    report.assert_clean(&[&v1, &v2]);
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_catalog_file_turned_into_a_device_or_fifo_refuses_the_reload_and_the_catalog_keeps_serving() {
    let dir = TempDir::new("special");
    let file = dir.join("mine.toml");
    std::fs::write(&file, catalog("mine", 3)).expect("write");
    let (v1, server, load) = serve_under_load(&dir.0, &[]).await;
    let errors = || sample(&server.scrape(), "retryd_policy_reload_total{result=\"error\"}").unwrap_or(0.0);

    // A symlink to /dev/zero in its place: refused (not read until memory
    // runs out), counted, logged with the path; "mine" keeps deciding.
    let link = dir.join(".mine.toml.link");
    std::os::unix::fs::symlink("/dev/zero", &link).expect("symlink");
    std::fs::rename(&link, &file).expect("rename over");
    eventually(RELOAD_WITHIN, "a refused reload is counted", || async {
        (errors() >= 1.0).then_some(())
    })
    .await;
    server
        .until_logged(&["policy reload refused", "mine.toml: not a regular file (a device)"])
        .await;
    assert_eq!(decide(&server, classify_mine()).await.policy_version, v1);

    // A FIFO: refused at once, and the reloads after it still happen.
    std::fs::remove_file(&file).expect("remove");
    let made = std::process::Command::new("mkfifo")
        .arg(&file)
        .status()
        .expect("mkfifo");
    assert!(made.success());
    server.until_logged(&["mine.toml: not a regular file (a FIFO)"]).await;
    assert_eq!(decide(&server, classify_mine()).await.policy_version, v1);
    replace_file(&file, &catalog("mine", 2));
    let v2 = version_of(&[&dir.0]);
    until_version(&server, &v2).await;

    load.more_calls(CALLS_BETWEEN).await;
    let report = load.stop().await;
    report.assert_clean(&[&v1, &v2]);
}

/// Lays out a directory as the kubelet mounts a ConfigMap:
/// `..<stamp>/mine.toml`, `..data -> ..<stamp>`, `mine.toml -> ..data/mine.toml`.
fn configmap(dir: &TempDir, stamp: &str, text: &str) {
    let data = dir.join(&format!("..{stamp}"));
    std::fs::create_dir(&data).expect("create data dir");
    std::fs::write(data.join("mine.toml"), text).expect("write");
    std::os::unix::fs::symlink(format!("..{stamp}"), dir.join("..data")).expect("..data symlink");
    std::os::unix::fs::symlink("..data/mine.toml", dir.join("mine.toml")).expect("file symlink");
}

/// Updates it as the kubelet does: a new `..<stamp>`, a temporary symlink
/// to it renamed over `..data` (atomic), then the old data removed.
fn configmap_update(dir: &TempDir, old: &str, stamp: &str, text: &str) {
    let data = dir.join(&format!("..{stamp}"));
    std::fs::create_dir(&data).expect("create data dir");
    std::fs::write(data.join("mine.toml"), text).expect("write");
    std::os::unix::fs::symlink(format!("..{stamp}"), dir.join("..data_tmp")).expect("temp symlink");
    std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).expect("swap ..data");
    std::fs::remove_dir_all(dir.join(&format!("..{old}"))).expect("remove old data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configmap_symlink_swap_reloads() {
    // Both ways to point at a mounted ConfigMap: the directory, or the file.
    for target in ["dir", "file"] {
        let dir = TempDir::new("configmap");
        configmap(&dir, "2026_x", &catalog("mine", 3));
        let policy = match target {
            "dir" => dir.0.clone(),
            _ => dir.join("mine.toml"),
        };
        let (v1, server, load) = serve_under_load(&policy, &[]).await;

        configmap_update(&dir, "2026_x", "2026_y", &catalog("mine", 2));
        let v2 = version_of(&[&policy]);
        assert_ne!(v1, v2);
        until_version(&server, &v2).await;
        load.more_calls(CALLS_BETWEEN).await;

        // And once more, so the watch survived the first swap.
        configmap_update(&dir, "2026_y", "2026_z", &catalog("mine", 4));
        let v3 = version_of(&[&policy]);
        until_version(&server, &v3).await;

        load.more_calls(CALLS_BETWEEN).await;
        let report = load.stop().await;
        report.assert_clean(&[&v1, &v2, &v3]);
        server.until_logged(&[&v3]).await;
    }
}

#[tokio::test]
async fn the_policy_env_twin_takes_a_comma_separated_list() {
    let a = TempDir::new("env-a");
    let b = TempDir::new("env-b");
    std::fs::write(a.join("mine.toml"), catalog("mine", 3)).expect("write");
    std::fs::write(b.join("other.toml"), catalog("other", 2)).expect("write");
    let version = version_of(&[&a.0, &b.join("other.toml")]);
    let env = format!("{},{}", a.as_str(), b.join("other.toml").display());
    let server = Server::start_with_env(&[], &[("RETRYD_POLICY", &env)]);
    assert_eq!(decide(&server, classify_mine()).await.policy_version, version);
    let list = server
        .client()
        .await
        .list_catalogs(pb::ListCatalogsRequest::default())
        .await
        .expect("ListCatalogs")
        .into_inner();
    let names: Vec<&str> = list.catalogs.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(&names[5..], ["mine", "other"]);
}

#[tokio::test]
async fn sighup_without_policy_is_harmless() {
    let mut server = Server::start(&[]);
    server.hangup();
    eventually(RELOAD_WITHIN, "SIGHUP is logged", || async {
        server.log().contains("nothing to reload").then_some(())
    })
    .await;
    assert!(server.is_running(), "SIGHUP must not stop the server");
    assert!(serving(&server).await);
    let mut req = classify_mine();
    req.failure.as_mut().expect("failure").catalog = "vibecode".into();
    assert_eq!(decide(&server, req).await.catalog, "vibecode");
}

#[test]
fn a_broken_policy_at_startup_exits_2_naming_file_and_line() {
    let dir = TempDir::new("startup");
    std::fs::write(dir.join("good.toml"), catalog("good", 3)).expect("write");
    std::fs::write(
        dir.join("bad.toml"),
        catalog("bad", 0).replace("delay = \"retry_after\"", "delay = \"soon\""),
    )
    .expect("write");
    let (status, stderr) = serve_expecting_exit(&["--policy", dir.as_str()]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    // Every error, each with file:line: key.
    assert!(stderr.contains("bad.toml:4: max_attempts"), "{stderr}");
    assert!(stderr.contains("bad.toml:16: codes[0].delay"), "{stderr}");
    assert!(!stderr.contains("listening on"), "{stderr}");

    let (status, stderr) = serve_expecting_exit(&["--policy", "/nonexistent/retryd/policy.toml"]);
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("/nonexistent/retryd/policy.toml"), "{stderr}");
}

#[tokio::test]
async fn reflection_describes_list_catalogs() {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = Server::start(&[]);
    for symbol in [
        "retryd.v1.RetryDecisionService.ListCatalogs",
        "retryd.v1.ListCatalogsResponse",
        "retryd.v1.CatalogCode",
    ] {
        let response = reflect(
            server.channel().await,
            MessageRequest::FileContainingSymbol(symbol.into()),
        )
        .await;
        assert!(
            matches!(response.message_response, Some(MessageResponse::FileDescriptorResponse(ref f)) if !f.file_descriptor_proto.is_empty()),
            "{symbol}: {response:?}"
        );
    }
}
