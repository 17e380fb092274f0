//! Runs every scenario of clients/conformance/scenarios against the real
//! retryd (RETRYD_BIN, else the retryd the same `cargo test` built) with this library,
//! concurrently. Without a binary the test is skipped with a message, unless
//! RETRYD_CONFORMANCE_REQUIRED=1 (CI sets it).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

mod support;

use retryd_client::pb;
use retryd_client::{Call, Client, DependencyError, Error, Failure, HttpStatusError, IntoFailure, Operation, ReadBack};
use serde_json::Value;
use tonic_types::StatusExt;

const TOKEN: &str = "conformance-operator-token-0123456789";

#[derive(Debug)]
enum DepError {
    Mapped(Box<Failure>),
    Other(String),
}

impl std::fmt::Display for DepError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DepError::Mapped(m) => write!(f, "dependency failed: {}", m.code),
            DepError::Other(s) => write!(f, "{s}"),
        }
    }
}

impl IntoFailure for DepError {
    fn to_failure(&self) -> Option<Failure> {
        match self {
            DepError::Mapped(f) => Some((**f).clone()),
            DepError::Other(_) => None,
        }
    }
}

struct Dep {
    sc: Value,
    state: Mutex<(usize, usize, usize, Vec<String>)>, // runs, effects, read_backs, keys
}

impl Dep {
    fn apply(&self, st: &mut (usize, usize, usize, Vec<String>)) {
        let call = &self.sc["call"];
        if call["operation"] != "write" {
            return;
        }
        if let Some(k) = call["idempotency_key"].as_str() {
            if self.sc["dependency"]["dedupe_by_key"] == true {
                if st.3.iter().any(|x| x == k) {
                    return;
                }
                st.3.push(k.to_string());
            }
        }
        st.1 += 1;
    }

    fn run(&self) -> Result<String, DepError> {
        let mut st = self.state.lock().unwrap();
        let outs = self.sc["dependency"]["outcomes"].as_array().unwrap();
        let o = &outs[st.0.min(outs.len() - 1)];
        st.0 += 1;
        if let Some(v) = o["ok"].as_str() {
            self.apply(&mut st);
            return Ok(v.to_string());
        }
        if o["applied"] == true {
            self.apply(&mut st);
        }
        Err(make_error(&o["error"]))
    }

    fn read_back(&self) -> ReadBack<String> {
        let mut st = self.state.lock().unwrap();
        st.2 += 1;
        if self.sc["call"]["read_back"] == "inconclusive" {
            return ReadBack::Inconclusive;
        }
        if st.1 > 0 {
            ReadBack::Present("found".into())
        } else {
            ReadBack::Absent
        }
    }
}

fn make_error(e: &Value) -> DepError {
    let mut headers: Vec<(String, String)> = Vec::new();
    if let Some(ra) = e["retry_after"].as_str() {
        headers.push(("Retry-After".into(), ra.into()));
    }
    if let Some(s) = e["retry_after_date_in_s"].as_u64() {
        headers.push((
            "Retry-After".into(),
            httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(s)),
        ));
    }
    let hv = || headers.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    match e["kind"].as_str().unwrap() {
        "code" => {
            let mut d = DependencyError::new(e["code"].as_str().unwrap());
            if let Some(ra) = e["retry_after"].as_str() {
                d = d.retry_after(ra);
            }
            if let Some(ms) = e["retry_after_ms"].as_u64() {
                d = d.retry_after_ms(ms);
            }
            if let Some(c) = e["catalog"].as_str() {
                d = d.catalog(c);
            }
            DepError::Mapped(Box::new(d.to_failure().unwrap()))
        }
        "http" => DepError::Mapped(Box::new(
            HttpStatusError {
                status: e["status"].as_u64().unwrap() as u16,
                headers: headers.clone(),
            }
            .to_failure()
            .unwrap(),
        )),
        "grpc" => {
            let code = match e["status"].as_str().unwrap() {
                "UNAVAILABLE" => tonic::Code::Unavailable,
                "INVALID_ARGUMENT" => tonic::Code::InvalidArgument,
                "RESOURCE_EXHAUSTED" => tonic::Code::ResourceExhausted,
                other => panic!("add {other} to the runner"),
            };
            let mut st = match e["retry_delay_ms"].as_u64() {
                Some(ms) => tonic::Status::with_error_details(
                    code,
                    "scripted",
                    tonic_types::ErrorDetails::with_retry_info(Some(Duration::from_millis(ms))),
                ),
                None => tonic::Status::new(code, "scripted"),
            };
            for v in e["pushback"].as_array().into_iter().flatten() {
                st.metadata_mut().append(
                    "grpc-retry-pushback-ms",
                    v.as_str().unwrap().parse().expect("an ASCII pushback value"),
                );
            }
            DepError::Mapped(Box::new(retryd_client::from_grpc(&st)))
        }
        "envelope" => DepError::Mapped(Box::new(retryd_client::from_envelope(&e["body"].to_string(), hv()))),
        _ => DepError::Other(e["message"].as_str().unwrap_or("other").into()),
    }
}

async fn setup(client: &Client, sc: &Value, tenant: &str, dep: &str) -> Result<(), String> {
    let stub = &mut client.stub();
    for step in sc["setup"].as_array().cloned().unwrap_or_default() {
        if let Some(p) = step.get("place_quota_stop") {
            let at = SystemTime::now() + Duration::from_millis(p["resets_in_ms"].as_u64().unwrap());
            let d = stub.classify(support::quota_stop(tenant, dep, at)).await.unwrap();
            assert!(d.into_inner().decision.unwrap().hold.is_some(), "setup placed no hold");
            // The stop stands for one placed elsewhere in the fleet: it reaches
            // the mirror by its watch event, within milliseconds (a call in that
            // window is admitted; bench/mirror.sh measures it). The scenarios
            // written before the mirror call at once: wait for it here.
            let until = std::time::Instant::now() + Duration::from_secs(3);
            while client.stats().holds == 0 && std::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
        if step.get("mirror_sync").is_some() {
            tokio::time::timeout(Duration::from_secs(3), client.watch([dep], [tenant]))
                .await
                .map_err(|_| "setup mirror_sync: not synced in 3 s".to_string())?
                .map_err(|e| format!("setup mirror_sync: {e}"))?;
        }
        if let Some(w) = step.get("wait_mirror_holds") {
            let min = w["min"].as_u64().unwrap_or(1) as usize;
            let until = std::time::Instant::now() + Duration::from_secs(3);
            while client.stats().holds < min {
                if std::time::Instant::now() > until {
                    return Err(format!(
                        "setup wait_mirror_holds: {} < {min} after 3 s",
                        client.stats().holds
                    ));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        if step.get("release_holds").is_some() {
            let mut req = tonic::Request::new(pb::ListHoldsRequest {
                tenant: tenant.into(),
                dependency: dep.into(),
                ..Default::default()
            });
            req.metadata_mut()
                .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
            let holds = stub.list_holds(req).await.unwrap().into_inner().holds;
            assert!(!holds.is_empty(), "setup: no hold to release");
            for h in holds {
                let mut req = tonic::Request::new(pb::ReleaseHoldRequest { id: h.id });
                req.metadata_mut()
                    .insert("authorization", format!("Bearer {TOKEN}").parse().unwrap());
                stub.release_hold(req).await.unwrap();
            }
            // The lift reaches the mirror by its watch event: wait for it (as for a placement).
            let until = std::time::Instant::now() + Duration::from_secs(3);
            while client.stats().holds > 0 && std::time::Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    }
    Ok(())
}

async fn run_one(addr: String, down: String, slow: String, shedding: Option<String>, sc: Value) -> Vec<String> {
    let name = sc["name"].as_str().unwrap().to_string();
    let run = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let (tenant, depname) = (format!("t-{name}-rust-{run}"), format!("d-{name}-rust-{run}"));
    let up = sc["retryd"].as_str().unwrap_or("up") == "up";
    let target = match sc["retryd"].as_str().unwrap_or("up") {
        "up" => addr.clone(),
        "slow" => slow,
        "shedding" => match shedding {
            Some(a) => a,
            None => return vec!["no shedding retryd".into()],
        },
        _ => down,
    };
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let refusals = Arc::new(AtomicU32::new(0));
    let real = sc["sleep"] != "record";
    let w2 = waits.clone();
    let r2 = refusals.clone();
    let client = Client::builder(target)
        .catalog(sc["call"]["catalog"].as_str().unwrap_or(""))
        .dependency(depname.clone())
        .tenant(tenant.clone())
        .connect_timeout(Duration::from_millis(500))
        // Scenarios test the loop, not the 50 ms default: on a loaded CI machine 34 concurrent
        // first calls to a debug server can take longer (the retryd-down scenarios test the fallback).
        .timeout(Duration::from_secs(2))
        .sleeper(Arc::new(move |d| {
            w2.lock().unwrap().push(d);
            Box::pin(async move {
                if real {
                    tokio::time::sleep(d).await
                }
            })
        }))
        .hook(Arc::new(move |e| {
            if e.kind == "admit_refused" {
                r2.fetch_add(1, Ordering::Relaxed);
            }
        }))
        .connect()
        .await;
    if up {
        if let Err(e) = setup(&client, &sc, &tenant, &depname).await {
            client.close().await;
            return vec![e];
        }
    }
    let dep = Arc::new(Dep {
        sc: sc.clone(),
        state: Mutex::new((0, 0, 0, Vec::new())),
    });
    let c = &sc["call"];
    let op = match c["operation"].as_str() {
        Some("read") => Operation::Read,
        Some("write") => Operation::Write,
        _ => Operation::Unspecified,
    };
    let mut call = Call::new(op, c["method"].as_str().unwrap_or(""));
    if let Some(k) = c["idempotency_key"].as_str() {
        call = call.idempotency_key(k, c["idempotency_key_enforced"] == true);
    }
    if c["read_back"].is_string() {
        let d = dep.clone();
        call = call.read_back(move || {
            let r = d.read_back();
            async move { r }
        });
    }
    if let Some(ms) = c["deadline_ms"].as_u64() {
        call = call.timeout(Duration::from_millis(ms));
    }
    let before = client.stats();
    let t0 = tokio::time::Instant::now();
    let d = dep.clone();
    let repeat = c["repeat"].as_u64().unwrap_or(1).max(1);
    for _ in 1..repeat {
        let d = d.clone();
        let _ = client
            .call(Call::new(op, c["method"].as_str().unwrap_or("")), move || {
                let r = d.run();
                async move { r }
            })
            .await;
    }
    let fut = client.call(call, move || {
        let r = d.run();
        async move { r }
    });
    let res = match c["cancel_after_ms"].as_u64() {
        // Cancelling a Rust future is dropping it.
        Some(ms) => tokio::time::timeout(Duration::from_millis(ms), fut)
            .await
            .map_err(|_| ()),
        None => Ok(fut.await),
    };
    let elapsed = t0.elapsed();
    client.close().await; // flushes the outcome counts
    let after = client.stats();
    let (mut result, mut error, mut verdict, mut terminal) = (None, None, String::new(), String::new());
    let mut rejected_field = None;
    match res {
        Err(()) => error = Some("cancelled"),
        Ok(Ok(v)) => result = Some(v),
        Ok(Err(e)) => {
            error = Some(match e {
                Error::Refused { decision, .. } => {
                    // the scenarios spell verdicts as the proto does
                    verdict = decision.verdict.to_string().to_uppercase();
                    terminal = decision.terminal_state.clone();
                    "retry_refused"
                }
                Error::Held { .. } => "held",
                Error::DeadlineExceeded { .. } => "deadline_exceeded",
                Error::Unavailable { .. } => "fallback",
                Error::Dependency(_) => "unmapped",
                Error::Rejected { field, .. } => {
                    rejected_field = Some(field);
                    "rejected"
                }
            })
        }
    }
    let e = &sc["expect"];
    let (runs, effects, read_backs) = {
        let st = dep.state.lock().unwrap();
        (st.0 as u64, st.1 as u64, st.2 as u64)
    };
    let waits = waits.lock().unwrap().clone();
    let wait_ms = waits.iter().sum::<Duration>().as_secs_f64() * 1000.0;
    let mut bad = Vec::new();
    let mut want = |ok: bool, what: String| {
        if !ok {
            bad.push(what)
        }
    };
    if let Some(n) = e["runs"].as_u64() {
        want(runs == n, format!("runs {runs} != {n}"));
    }
    if let Some(n) = e["runs_min"].as_u64() {
        want(runs >= n, format!("runs {runs} < {n}"));
    }
    if let Some(n) = e["runs_max"].as_u64() {
        want(runs <= n, format!("runs {runs} > {n}"));
    }
    if let Some(n) = e["effects"].as_u64() {
        want(effects == n, format!("effects {effects} != {n}"));
    }
    if let Some(n) = e["read_backs"].as_u64() {
        want(read_backs == n, format!("read_backs {read_backs} != {n}"));
    }
    if let Some(n) = e["wait_ms_min"].as_f64() {
        want(wait_ms >= n, format!("waited {wait_ms:.0} ms < {n}"));
    }
    if let Some(n) = e["wait_ms_max"].as_f64() {
        want(wait_ms <= n, format!("waited {wait_ms:.0} ms > {n}"));
    }
    if let Some(w) = e["waits_ms"].as_array() {
        let got: Vec<u64> = waits.iter().map(|d| d.as_millis() as u64).collect();
        let exp: Vec<u64> = w.iter().map(|x| x.as_u64().unwrap()).collect();
        want(got == exp, format!("waits {got:?} != {exp:?}"));
    }
    if let Some(n) = e["elapsed_ms_max"].as_u64() {
        want(
            elapsed.as_millis() as u64 <= n,
            format!("took {} ms > {n}", elapsed.as_millis()),
        );
    }
    if let Some(n) = e["admit_refusals_min"].as_u64() {
        let r = refusals.load(Ordering::Relaxed) as u64;
        want(r >= n, format!("admit refusals {r} < {n}"));
    }
    if let Some(n) = e["fallbacks_min"].as_u64() {
        want(
            client.fallbacks() >= n,
            format!("fallbacks {} < {n}", client.fallbacks()),
        );
    }
    let admits = after.admit_rpcs - before.admit_rpcs;
    if let Some(n) = e["admit_rpcs_max"].as_u64() {
        want(admits <= n, format!("Admit RPCs {admits} > {n}"));
    }
    if let Some(n) = e["admit_rpcs_min"].as_u64() {
        want(admits >= n, format!("Admit RPCs {admits} < {n}"));
    }
    let local = after.local_refusals - before.local_refusals;
    if let Some(n) = e["local_refusals_min"].as_u64() {
        want(local >= n, format!("local refusals {local} < {n}"));
    }
    let reports = after.report_rpcs - before.report_rpcs;
    if let Some(n) = e["report_rpcs_max"].as_u64() {
        want(reports <= n, format!("ReportOutcomes RPCs {reports} > {n}"));
    }
    // Shed answers and busy skips over the client's life: its mirror's
    // stream, opened at connect, may be the RPC that met the shed server first.
    if let Some(n) = e["shed_answers_min"].as_u64() {
        want(
            after.shed_answers >= n,
            format!("shed answers {} < {n}", after.shed_answers),
        );
    }
    if let Some(n) = e["busy_skips_min"].as_u64() {
        want(after.busy_skips >= n, format!("busy skips {} < {n}", after.busy_skips));
    }
    let reported = after.reported_requests - before.reported_requests;
    if let Some(n) = e["reported_requests"].as_u64() {
        want(reported == n, format!("reported first attempts {reported} != {n}"));
    }
    let mut errs: Vec<String> = e["error_any"]
        .as_array()
        .map(|a| a.iter().map(|x| x.as_str().unwrap().to_string()).collect())
        .unwrap_or_default();
    if let Some(s) = e["error"].as_str() {
        errs = vec![s.to_string()];
    }
    if errs.is_empty() {
        want(error.is_none(), format!("unexpected error {error:?} {verdict}"));
    } else {
        want(
            error.is_some_and(|x| errs.iter().any(|y| y == x)),
            format!("error {error:?} {verdict} not in {errs:?}"),
        );
    }
    if let Some(s) = e["result"].as_str() {
        want(result.as_deref() == Some(s), format!("result {result:?} != {s}"));
    }
    if let Some(s) = e["verdict"].as_str() {
        want(verdict == s, format!("verdict {verdict} != {s}"));
    }
    if let Some(a) = e["verdict_any"].as_array() {
        want(
            a.iter().any(|x| x == verdict.as_str()),
            format!("verdict {verdict} not in {a:?}"),
        );
    }
    if let Some(s) = e["rejected_field"].as_str() {
        want(
            rejected_field.as_deref() == Some(s),
            format!("rejected field {rejected_field:?} != {s}"),
        );
    }
    if let Some(s) = e["terminal_state"].as_str() {
        want(terminal == s, format!("terminal_state {terminal} != {s}"));
    }
    bad
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conformance() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let Some(bin) = support::binary() else { return };
    // The suite's own catalog (a circuit with a 600 ms probe).
    let policy = root.join("clients/conformance/policies");
    let server = support::start(&bin, "conf-rust", TOKEN, Some(&policy)).await;
    let addr = server.addr.clone();
    let down = format!("127.0.0.1:{}", support::free_port());
    // A retryd slower than any timeout: it accepts connections (the kernel
    // does, from the backlog) and never answers.
    let slow_listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow = slow_listener.local_addr().unwrap().to_string();
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join("clients/conformance/scenarios"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    let scenarios: Vec<Value> = files
        .iter()
        .map(|f| serde_json::from_str(&std::fs::read_to_string(f).unwrap()).unwrap())
        .collect();
    // A second retryd that sheds every call with advice (`--max-buffered-bytes
    // 1`), started once if a scenario needs it, before the scenarios start
    // together (its start would compete with their first calls).
    let shedding = match scenarios.iter().any(|sc| sc["retryd"] == "shedding") {
        true => {
            let flags = ["--max-buffered-bytes", "1"];
            Some(support::start_with(&bin, "conf-rust-shed", TOKEN, Some(&policy), &flags).await)
        }
        false => None,
    };
    let t0 = std::time::Instant::now();
    let mut tasks = Vec::new();
    for sc in scenarios {
        let name = sc["name"].as_str().unwrap().to_string();
        let shed = shedding.as_ref().map(|s| s.addr.clone());
        tasks.push((
            name,
            tokio::spawn(run_one(addr.clone(), down.clone(), slow.clone(), shed, sc)),
        ));
    }
    let mut failed = 0;
    for (name, t) in tasks {
        let bad = t.await.unwrap_or_else(|e| vec![format!("panicked: {e}")]);
        if bad.is_empty() {
            println!("conformance rust: PASS {name}");
        } else {
            failed += 1;
            println!("conformance rust: FAIL {name}: {}", bad.join("; "));
        }
    }
    println!(
        "conformance rust: {} passed, {failed} failed ({:.1} s)",
        files.len() - failed,
        t0.elapsed().as_secs_f64()
    );
    drop(server);
    drop(shedding);
    assert_eq!(failed, 0, "conformance scenarios failed");
}
