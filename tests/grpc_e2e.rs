//! End-to-end: the real `retryd serve` binary over a real socket, driven by
//! the generated tonic client.

mod grpc_support;

use grpc_support::{Server, failure, reflect, sample};
use retryd::grpc::pb::{self, batch_result::Outcome};
use tonic::Code;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_types::{RpcStatusExt as _, StatusExt as _};

fn classify(f: pb::Failure) -> pb::ClassifyRequest {
    pb::ClassifyRequest {
        failure: Some(Box::new(f)),
        locale: String::new(),
    }
}

/// The first BadRequest violation's `(field, description)` of an error.
fn violation(status: &tonic::Status) -> (String, String) {
    let br = status
        .get_details_bad_request()
        .unwrap_or_else(|| panic!("no BadRequest detail in {status:?}"));
    let v = br.field_violations.first().expect("a field violation");
    (v.field.clone(), v.description.clone())
}

#[tokio::test]
async fn classify_write_timeout_requires_state_verification() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let mut f = failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write);
    f.request_id = "req-42".into();
    let d = client
        .classify(classify(f))
        .await
        .expect("Classify")
        .into_inner()
        .decision
        .expect("decision");
    assert_eq!(d.verdict(), pb::Verdict::StateVerificationRequired);
    let retry = d.retry.as_ref().expect("retry contract");
    assert!(!retry.safe);
    assert!(retry.retryable);
    assert_eq!(
        retry.reconciliation_action.as_deref(),
        Some("read_back_by_business_key")
    );
    assert_eq!(retry.side_effect_state(), pb::SideEffectState::Possible);
    assert_eq!(d.catalog, "vibecode");
    assert_eq!(d.code, "BITRIX_TIMEOUT");
    assert!(d.known_code);
    assert_eq!(d.operation(), pb::OperationKind::Write);
    assert_eq!(d.rule, "vibecode/BITRIX_TIMEOUT/write");
    assert_eq!(d.request_id, "req-42");
    assert!(d.policy_version.starts_with("sha256:"), "{}", d.policy_version);
    assert!(!d.reason.is_empty());
}

#[tokio::test]
async fn classify_reads_locale_and_tolerates_unknown_enum_numbers() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    // Operation 99 is not in this build's enum: read as "not given", so the
    // operation is inferred from the method.
    let mut f = failure("", "BITRIX_TIMEOUT", pb::OperationKind::Unspecified);
    f.operation = 99;
    f.read_back = 77;
    f.method = "crm.deal.get".into();
    let en = client
        .classify(classify(f.clone()))
        .await
        .expect("Classify")
        .into_inner()
        .decision
        .expect("decision");
    assert_eq!(en.operation(), pb::OperationKind::Read);
    assert!(en.operation_inferred);
    assert_eq!(en.catalog, "vibecode", "empty catalog means the default");
    let ru = client
        .classify(pb::ClassifyRequest {
            failure: Some(Box::new(f)),
            locale: "ru-RU".into(),
        })
        .await
        .expect("Classify ru")
        .into_inner()
        .decision
        .expect("decision");
    assert_ne!(ru.reason, en.reason, "the reason follows the locale");
    assert!(ru.warnings.is_empty(), "{:?}", ru.warnings);
}

#[tokio::test]
async fn a_code_in_another_case_is_answered_with_a_did_you_mean_warning() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let f = failure("vibecode", "bitrix_timeout", pb::OperationKind::Write);
    let d = client
        .classify(classify(f.clone()))
        .await
        .expect("Classify")
        .into_inner()
        .decision
        .expect("decision");
    assert!(!d.known_code);
    assert_eq!(d.rule, "vibecode/unknown/write");
    assert!(
        d.warnings
            .iter()
            .any(|w| w.starts_with("code_case_mismatch: did you mean BITRIX_TIMEOUT?")),
        "{:?}",
        d.warnings
    );
    // in a batch too, and the next item's answer carries nothing of it
    let batch = client
        .classify_batch(pb::ClassifyBatchRequest {
            failures: vec![f, failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write)],
            ..Default::default()
        })
        .await
        .expect("ClassifyBatch")
        .into_inner();
    let decision = |i: usize| match &batch.results[i].outcome {
        Some(Outcome::Decision(d)) => d.clone(),
        other => panic!("item {i}: {other:?}"),
    };
    assert!(decision(0).warnings[0].contains("did you mean BITRIX_TIMEOUT"));
    assert!(decision(1).warnings.is_empty());
}

#[tokio::test]
async fn classify_errors_name_the_field() {
    let server = Server::start(&[]);
    let mut client = server.client().await;

    let err = client
        .classify(classify(failure("nope", "X", pb::OperationKind::Read)))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let (field, description) = violation(&err);
    assert_eq!(field, "failure.catalog");
    for name in ["vibecode", "asc", "frontspin"] {
        assert!(description.contains(name), "catalogs named in {description:?}");
    }

    let mut f = failure("", &"C".repeat(129), pb::OperationKind::Read);
    f.attempt = 2;
    let err = client.classify(classify(f)).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let (field, description) = violation(&err);
    assert_eq!(field, "failure.code");
    assert!(
        description.contains("129") && description.contains("128"),
        "{description}"
    );

    let err = client.classify(pb::ClassifyRequest::default()).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(violation(&err).0, "failure");
}

#[tokio::test]
async fn batch_answers_in_order_and_isolates_bad_items() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let mut oversize = failure("asc", "X", pb::OperationKind::Write);
    oversize.tenant = "t".repeat(300);
    let req = pb::ClassifyBatchRequest {
        failures: vec![
            failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write),
            failure("no-such-catalog", "BITRIX_TIMEOUT", pb::OperationKind::Write),
            failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Write),
            oversize,
            failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read),
        ],
        locale: "en".into(),
    };
    let resp = client.classify_batch(req).await.expect("ClassifyBatch").into_inner();
    assert_eq!(
        resp.results.iter().map(|r| r.index).collect::<Vec<_>>(),
        [0, 1, 2, 3, 4]
    );

    let decision = |i: usize| match &resp.results[i].outcome {
        Some(Outcome::Decision(d)) => d.clone(),
        other => panic!("result {i} should be a decision: {other:?}"),
    };
    let error = |i: usize| match &resp.results[i].outcome {
        Some(Outcome::Error(s)) => s.clone(),
        other => panic!("result {i} should be an error: {other:?}"),
    };
    assert_eq!(decision(0).verdict(), pb::Verdict::StateVerificationRequired);
    assert_eq!(decision(2).verdict(), pb::Verdict::StateVerificationRequired);
    let read = decision(4);
    assert_eq!(read.operation(), pb::OperationKind::Read);

    let bad_catalog = error(1);
    assert_eq!(bad_catalog.code, Code::InvalidArgument as i32);
    let br = bad_catalog
        .get_details_bad_request()
        .expect("BadRequest packed in the item's Status");
    assert_eq!(br.field_violations[0].field, "failures[1].catalog");
    assert!(
        bad_catalog.message.starts_with("failures[1].catalog: "),
        "{}",
        bad_catalog.message
    );
    let oversize = error(3);
    assert_eq!(
        oversize.get_details_bad_request().expect("BadRequest").field_violations[0].field,
        "failures[3].tenant"
    );

    let summary = resp.summary.expect("summary");
    assert_eq!(summary.errors, 2);
    assert_eq!(summary.state_verification_required, 2);
    let read_slot = match read.verdict() {
        pb::Verdict::RetryWithLimit => summary.retry_with_limit,
        pb::Verdict::FixBeforeRetry => summary.fix_before_retry,
        pb::Verdict::DoNotRetry => summary.do_not_retry,
        pb::Verdict::AlreadyApplied => summary.already_applied,
        pb::Verdict::StateVerificationRequired => summary.state_verification_required - 2,
        pb::Verdict::Unspecified => panic!("server sent VERDICT_UNSPECIFIED"),
    };
    assert_eq!(read_slot, 1);
}

/// ClassifyBatch decodes into, and answers in, storage of earlier batches
/// (`grpc::wire::pool`): an answer must carry nothing of the batch before it.
/// Each item is checked against Classify, which does not pool.
#[tokio::test]
async fn a_batch_answer_carries_nothing_of_the_batch_before() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let secret = |i: usize| {
        let mut f = failure("asc", "RESULT_STATE_UNKNOWN", pb::OperationKind::Write);
        f.idempotency_key = format!("secret-key-{i}");
        f.idempotency_key_enforced = true;
        f.request_id = format!("secret-request-{i}");
        f.tenant = "secret-tenant".into();
        f.retry_after = "tomorrow".into();
        f.upstream = Some(pb::RetryContract {
            reconciliation_action: Some("secret-action".into()),
            ..Default::default()
        });
        f
    };
    let earlier = pb::ClassifyBatchRequest {
        failures: (0..50).map(secret).collect(),
        locale: "ru".into(),
    };
    let first = client.classify_batch(earlier).await.expect("first batch").into_inner();
    assert_eq!(first.results.len(), 50);

    let plain = vec![
        failure("vibecode", "BITRIX_TIMEOUT", pb::OperationKind::Read),
        pb::Failure::default(),
        failure("no-such-catalog", "X", pb::OperationKind::Write),
        failure("grpc", "UNAVAILABLE", pb::OperationKind::Read),
    ];
    for _ in 0..3 {
        let resp = client
            .classify_batch(pb::ClassifyBatchRequest {
                failures: plain.clone(),
                locale: String::new(),
            })
            .await
            .expect("later batch")
            .into_inner();
        assert_eq!(resp.results.len(), plain.len());
        assert!(
            !format!("{resp:?}").contains("secret"),
            "an earlier batch leaked into {resp:#?}"
        );
        for (i, (result, f)) in resp.results.iter().zip(&plain).enumerate() {
            assert_eq!(result.index as usize, i);
            let single = client.classify(classify(f.clone())).await;
            match (&result.outcome, single) {
                (Some(Outcome::Decision(d)), Ok(single)) => {
                    assert_eq!(Some(d), single.into_inner().decision.as_ref(), "item {i}")
                }
                (Some(Outcome::Error(e)), Err(single)) => assert_eq!(e.code, single.code() as i32, "item {i}"),
                (batch, single) => panic!("item {i}: batch {batch:?}, Classify {single:?}"),
            }
        }
    }
}

#[tokio::test]
async fn batch_over_the_limit_fails_whole() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    let req = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); 1_601],
        locale: String::new(),
    };
    let err = client.classify_batch(req).await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(err.message(), "failures: 1601 items; the limit is 1600 (--max-batch)");
    assert_eq!(violation(&err).0, "failures");

    // Exactly at the limit is fine, and every item is answered.
    let req = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); 1_600],
        locale: String::new(),
    };
    let resp = client
        .classify_batch(req)
        .await
        .expect("batch at the limit")
        .into_inner();
    assert_eq!(resp.results.len(), 1_600);
    assert_eq!(resp.results[1_599].index, 1_599);
}

#[tokio::test]
async fn max_batch_flag_is_honoured() {
    let server = Server::start(&["--max-batch", "2"]);
    let mut client = server.client().await;
    let req = pb::ClassifyBatchRequest {
        failures: vec![pb::Failure::default(); 3],
        locale: String::new(),
    };
    let err = client.classify_batch(req).await.unwrap_err();
    assert_eq!(err.message(), "failures: 3 items; the limit is 2 (--max-batch)");
}

#[tokio::test]
async fn message_over_max_message_bytes_is_resource_exhausted() {
    let server = Server::start(&["--max-message-bytes", "65536"]);
    let mut client = server.client().await;
    let mut f = failure("", "BITRIX_TIMEOUT", pb::OperationKind::Write);
    f.method = "m".repeat(70_000);
    let err = client.classify(classify(f)).await.unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted, "{err:?}");
    assert!(
        err.message().contains("65536") && err.message().contains("--max-message-bytes"),
        "{err:?}"
    );

    // Under the limit the same server answers.
    let ok = client
        .classify(classify(failure("", "BITRIX_TIMEOUT", pb::OperationKind::Write)))
        .await;
    assert!(ok.is_ok(), "{ok:?}");
    let scrape = server.scrape();
    assert!(
        scrape.contains(r#"grpc_method="Classify",grpc_code="ResourceExhausted"} 1"#),
        "metrics see the rewritten code:\n{scrape}"
    );
}

#[tokio::test]
async fn health_reports_serving() {
    let server = Server::start(&[]);
    let mut health = HealthClient::new(server.channel().await);
    for service in ["", "retryd.v1.RetryDecisionService"] {
        let resp = health
            .check(HealthCheckRequest {
                service: service.into(),
            })
            .await
            .unwrap_or_else(|e| panic!("check {service:?}: {e:?}"))
            .into_inner();
        assert_eq!(resp.status(), ServingStatus::Serving, "service {service:?}");
    }
    let err = health
        .check(HealthCheckRequest { service: "nope".into() })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);
}

#[tokio::test]
async fn health_probe_subcommand_exit_codes() {
    let server = Server::start(&[]);
    let probe = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_retryd"))
            .arg("health")
            .args(args)
            .output()
            .expect("run retryd health")
            .status
            .code()
    };
    let url = server.url();
    assert_eq!(probe(&["--addr", &url]), Some(0));
    assert_eq!(
        probe(&[
            "--addr",
            &server.addr.to_string(),
            "--service",
            "retryd.v1.RetryDecisionService"
        ]),
        Some(0)
    );
    assert_eq!(probe(&["--addr", &url, "--service", "nope"]), Some(3));
    assert_eq!(probe(&["--addr", &url, "--timeout", "soon"]), Some(1));
}

#[tokio::test]
async fn reflection_lists_the_services() {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = Server::start(&[]);
    let response = reflect(server.channel().await, MessageRequest::ListServices(String::new())).await;
    let Some(MessageResponse::ListServicesResponse(list)) = response.message_response else {
        panic!("unexpected reflection answer: {response:?}");
    };
    let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
    for expected in [
        "retryd.v1.RetryDecisionService",
        "grpc.health.v1.Health",
        "grpc.reflection.v1.ServerReflection",
    ] {
        assert!(names.contains(&expected), "{expected} missing from {names:?}");
    }

    // The service's file (and its google.rpc.Status import) can be described.
    let response = reflect(
        server.channel().await,
        MessageRequest::FileContainingSymbol("retryd.v1.BatchResult".into()),
    )
    .await;
    assert!(
        matches!(response.message_response, Some(MessageResponse::FileDescriptorResponse(ref f)) if !f.file_descriptor_proto.is_empty()),
        "{response:?}"
    );
}

/// Reflection serves google/rpc/error_details.proto, so grpcurl (and
/// grpcui) decode the BadRequest of an error instead of printing
/// "google.rpc.BadRequest is not recognized".
#[tokio::test]
async fn reflection_serves_the_error_details_grpcurl_decodes() {
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;

    let server = Server::start(&[]);
    for symbol in ["google.rpc.BadRequest", "google.rpc.ErrorInfo", "google.rpc.Status"] {
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

    let grpcurl = std::env::var_os("GRPCURL")
        .map(std::path::PathBuf::from)
        .or_else(|| {
            let home = std::path::PathBuf::from(std::env::var_os("HOME")?);
            Some(home.join("go/bin/grpcurl")).filter(|p| p.exists())
        })
        .or_else(|| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join("grpcurl"))
                .find(|p| p.exists())
        });
    let Some(grpcurl) = grpcurl else {
        assert!(
            std::env::var_os("CI").is_none(),
            "grpcurl not found (scripts/install-tools.sh installs it into ~/go/bin)"
        );
        eprintln!("grpcurl not installed: the grpcurl half of this test is skipped");
        return;
    };
    // A code over the 128-byte limit: INVALID_ARGUMENT naming failure.code.
    let request = format!(
        r#"{{"failure": {{"catalog": "vibecode", "code": "{}", "operation": "OPERATION_KIND_READ", "attempt": 1}}}}"#,
        "C".repeat(129)
    );
    // The server is another process: blocking here is harmless.
    let out = std::process::Command::new(&grpcurl)
        .args([
            "-plaintext",
            "-d",
            &request,
            &server.addr.to_string(),
            "retryd.v1.RetryDecisionService/Classify",
        ])
        .output()
        .expect("run grpcurl");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("InvalidArgument"), "{text}");
    assert!(
        !text.contains("not recognized"),
        "grpcurl could not decode a detail:\n{text}"
    );
    assert!(
        text.contains("google.rpc.BadRequest") && text.contains(r#""field": "failure.code""#),
        "grpcurl shows the field violation:\n{text}"
    );
}

#[tokio::test]
async fn metrics_count_calls_and_decisions() {
    let server = Server::start(&[]);
    let mut client = server.client().await;
    client
        .classify(classify(failure(
            "vibecode",
            "BITRIX_TIMEOUT",
            pb::OperationKind::Write,
        )))
        .await
        .expect("ok");
    let _ = client
        .classify(classify(failure("nope", "X", pb::OperationKind::Write)))
        .await
        .unwrap_err();
    let batch = pb::ClassifyBatchRequest {
        failures: vec![
            failure("asc", "X", pb::OperationKind::Write),
            failure("zzz", "X", pb::OperationKind::Write),
        ],
        locale: String::new(),
    };
    client.classify_batch(batch).await.expect("batch");

    let scrape = server.scrape();
    let svc = r#"grpc_type="unary",grpc_service="retryd.v1.RetryDecisionService""#;
    assert_eq!(
        sample(
            &scrape,
            &format!(r#"grpc_server_handled_total{{{svc},grpc_method="Classify",grpc_code="OK"}}"#)
        ),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        sample(
            &scrape,
            &format!(r#"grpc_server_handled_total{{{svc},grpc_method="Classify",grpc_code="InvalidArgument"}}"#)
        ),
        Some(1.0),
        "{scrape}"
    );
    assert_eq!(
        sample(
            &scrape,
            &format!(r#"grpc_server_handling_seconds_count{{{svc},grpc_method="ClassifyBatch"}}"#)
        ),
        Some(1.0),
        "{scrape}"
    );
    // go-grpc-prometheus' message counters: one request, one answer.
    for family in ["grpc_server_msg_received_total", "grpc_server_msg_sent_total"] {
        assert_eq!(
            sample(&scrape, &format!(r#"{family}{{{svc},grpc_method="ClassifyBatch"}}"#)),
            Some(1.0),
            "{scrape}"
        );
    }
    assert!(
        scrape.contains(&format!(
            r#"retryd_build_info{{version="{}",revision=""#,
            env!("CARGO_PKG_VERSION")
        )),
        "{scrape}"
    );
    for family in [
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
    ] {
        let value = sample(&scrape, &format!("{family} ")).unwrap_or(-1.0);
        assert!(value >= 0.0, "{family}: {scrape}");
    }
    let rss = sample(&scrape, "process_resident_memory_bytes ").unwrap_or(0.0);
    assert!(rss > 1_000_000.0, "RSS {rss}");
    assert_eq!(
        sample(
            &scrape,
            r#"retryd_decisions_total{catalog="vibecode",verdict="state_verification_required"}"#
        ),
        Some(1.0),
        "{scrape}"
    );
    assert!(scrape.contains(r#"retryd_decisions_total{catalog="asc""#), "{scrape}");
    assert!(
        !scrape.contains("zzz") && !scrape.contains("nope"),
        "client strings must not become labels:\n{scrape}"
    );
    assert_eq!(sample(&scrape, "retryd_batch_items_count"), Some(1.0), "{scrape}");
    assert_eq!(sample(&scrape, "retryd_batch_items_sum"), Some(2.0), "{scrape}");
}
