import datetime

from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.rpc import status_pb2 as _status_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class HoldEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLD_EVENT_KIND_UNSPECIFIED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_PLACED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_EXTENDED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_LIFTED: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_PROBING: _ClassVar[HoldEventKind]
    HOLD_EVENT_KIND_SYNCED: _ClassVar[HoldEventKind]

class HoldKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOLD_KIND_UNSPECIFIED: _ClassVar[HoldKind]
    HOLD_KIND_PAUSE: _ClassVar[HoldKind]
    HOLD_KIND_QUOTA_STOP: _ClassVar[HoldKind]
    HOLD_KIND_QUARANTINE: _ClassVar[HoldKind]
    HOLD_KIND_CIRCUIT_OPEN: _ClassVar[HoldKind]

class OperationKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OPERATION_KIND_UNSPECIFIED: _ClassVar[OperationKind]
    OPERATION_KIND_READ: _ClassVar[OperationKind]
    OPERATION_KIND_WRITE: _ClassVar[OperationKind]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_RETRY_WITH_LIMIT: _ClassVar[Verdict]
    VERDICT_STATE_VERIFICATION_REQUIRED: _ClassVar[Verdict]
    VERDICT_FIX_BEFORE_RETRY: _ClassVar[Verdict]
    VERDICT_DO_NOT_RETRY: _ClassVar[Verdict]
    VERDICT_ALREADY_APPLIED: _ClassVar[Verdict]

class TargetReached(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TARGET_REACHED_UNSPECIFIED: _ClassVar[TargetReached]
    TARGET_REACHED_NO: _ClassVar[TargetReached]
    TARGET_REACHED_YES: _ClassVar[TargetReached]
    TARGET_REACHED_UNKNOWN: _ClassVar[TargetReached]

class SideEffectState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIDE_EFFECT_STATE_UNSPECIFIED: _ClassVar[SideEffectState]
    SIDE_EFFECT_STATE_NONE: _ClassVar[SideEffectState]
    SIDE_EFFECT_STATE_POSSIBLE: _ClassVar[SideEffectState]
    SIDE_EFFECT_STATE_CONFIRMED: _ClassVar[SideEffectState]
    SIDE_EFFECT_STATE_UNKNOWN: _ClassVar[SideEffectState]

class Strategy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    STRATEGY_UNSPECIFIED: _ClassVar[Strategy]
    STRATEGY_NONE: _ClassVar[Strategy]
    STRATEGY_EXPONENTIAL_BACKOFF: _ClassVar[Strategy]
    STRATEGY_RETRY_AFTER: _ClassVar[Strategy]
    STRATEGY_SCHEDULE: _ClassVar[Strategy]
    STRATEGY_HOLD: _ClassVar[Strategy]
    STRATEGY_BUDGET: _ClassVar[Strategy]

class ReadBack(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READ_BACK_UNSPECIFIED: _ClassVar[ReadBack]
    READ_BACK_EFFECT_PRESENT: _ClassVar[ReadBack]
    READ_BACK_EFFECT_ABSENT: _ClassVar[ReadBack]
    READ_BACK_INCONCLUSIVE: _ClassVar[ReadBack]

class Scope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SCOPE_UNSPECIFIED: _ClassVar[Scope]
    SCOPE_REQUEST: _ClassVar[Scope]
    SCOPE_TENANT: _ClassVar[Scope]
    SCOPE_DEPENDENCY: _ClassVar[Scope]
    SCOPE_METHOD: _ClassVar[Scope]
HOLD_EVENT_KIND_UNSPECIFIED: HoldEventKind
HOLD_EVENT_KIND_PLACED: HoldEventKind
HOLD_EVENT_KIND_EXTENDED: HoldEventKind
HOLD_EVENT_KIND_LIFTED: HoldEventKind
HOLD_EVENT_KIND_PROBING: HoldEventKind
HOLD_EVENT_KIND_SYNCED: HoldEventKind
HOLD_KIND_UNSPECIFIED: HoldKind
HOLD_KIND_PAUSE: HoldKind
HOLD_KIND_QUOTA_STOP: HoldKind
HOLD_KIND_QUARANTINE: HoldKind
HOLD_KIND_CIRCUIT_OPEN: HoldKind
OPERATION_KIND_UNSPECIFIED: OperationKind
OPERATION_KIND_READ: OperationKind
OPERATION_KIND_WRITE: OperationKind
VERDICT_UNSPECIFIED: Verdict
VERDICT_RETRY_WITH_LIMIT: Verdict
VERDICT_STATE_VERIFICATION_REQUIRED: Verdict
VERDICT_FIX_BEFORE_RETRY: Verdict
VERDICT_DO_NOT_RETRY: Verdict
VERDICT_ALREADY_APPLIED: Verdict
TARGET_REACHED_UNSPECIFIED: TargetReached
TARGET_REACHED_NO: TargetReached
TARGET_REACHED_YES: TargetReached
TARGET_REACHED_UNKNOWN: TargetReached
SIDE_EFFECT_STATE_UNSPECIFIED: SideEffectState
SIDE_EFFECT_STATE_NONE: SideEffectState
SIDE_EFFECT_STATE_POSSIBLE: SideEffectState
SIDE_EFFECT_STATE_CONFIRMED: SideEffectState
SIDE_EFFECT_STATE_UNKNOWN: SideEffectState
STRATEGY_UNSPECIFIED: Strategy
STRATEGY_NONE: Strategy
STRATEGY_EXPONENTIAL_BACKOFF: Strategy
STRATEGY_RETRY_AFTER: Strategy
STRATEGY_SCHEDULE: Strategy
STRATEGY_HOLD: Strategy
STRATEGY_BUDGET: Strategy
READ_BACK_UNSPECIFIED: ReadBack
READ_BACK_EFFECT_PRESENT: ReadBack
READ_BACK_EFFECT_ABSENT: ReadBack
READ_BACK_INCONCLUSIVE: ReadBack
SCOPE_UNSPECIFIED: Scope
SCOPE_REQUEST: Scope
SCOPE_TENANT: Scope
SCOPE_DEPENDENCY: Scope
SCOPE_METHOD: Scope

class ListBudgetsRequest(_message.Message):
    __slots__ = ("catalog", "dependency", "limit")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    dependency: str
    limit: int
    def __init__(self, catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class ListBudgetsResponse(_message.Message):
    __slots__ = ("budgets",)
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    budgets: _containers.RepeatedCompositeFieldContainer[BudgetStanding]
    def __init__(self, budgets: _Optional[_Iterable[_Union[BudgetStanding, _Mapping]]] = ...) -> None: ...

class BudgetStanding(_message.Message):
    __slots__ = ("catalog", "scope", "rule", "budget", "deferred", "next_room_at")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROOM_AT_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    scope: str
    rule: str
    budget: RetryBudget
    deferred: int
    next_room_at: _timestamp_pb2.Timestamp
    def __init__(self, catalog: _Optional[str] = ..., scope: _Optional[str] = ..., rule: _Optional[str] = ..., budget: _Optional[_Union[RetryBudget, _Mapping]] = ..., deferred: _Optional[int] = ..., next_room_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class RetryBudget(_message.Message):
    __slots__ = ("scope_key", "requests", "retries", "allowed", "window_start", "deferred", "next_room_at")
    SCOPE_KEY_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    RETRIES_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_FIELD_NUMBER: _ClassVar[int]
    DEFERRED_FIELD_NUMBER: _ClassVar[int]
    NEXT_ROOM_AT_FIELD_NUMBER: _ClassVar[int]
    scope_key: str
    requests: int
    retries: int
    allowed: int
    window_start: _timestamp_pb2.Timestamp
    deferred: int
    next_room_at: _timestamp_pb2.Timestamp
    def __init__(self, scope_key: _Optional[str] = ..., requests: _Optional[int] = ..., retries: _Optional[int] = ..., allowed: _Optional[int] = ..., window_start: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., deferred: _Optional[int] = ..., next_room_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class CatalogBudget(_message.Message):
    __slots__ = ("scope", "window_ms", "retry_percent", "min_retries_per_sec", "requests")
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MS_FIELD_NUMBER: _ClassVar[int]
    RETRY_PERCENT_FIELD_NUMBER: _ClassVar[int]
    MIN_RETRIES_PER_SEC_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    scope: str
    window_ms: int
    retry_percent: int
    min_retries_per_sec: int
    requests: int
    def __init__(self, scope: _Optional[str] = ..., window_ms: _Optional[int] = ..., retry_percent: _Optional[int] = ..., min_retries_per_sec: _Optional[int] = ..., requests: _Optional[int] = ...) -> None: ...

class AdmitRequest(_message.Message):
    __slots__ = ("catalog", "dependency", "tenant", "method", "operation", "attempt")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    dependency: str
    tenant: str
    method: str
    operation: OperationKind
    attempt: int
    def __init__(self, catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., tenant: _Optional[str] = ..., method: _Optional[str] = ..., operation: _Optional[_Union[OperationKind, str]] = ..., attempt: _Optional[int] = ...) -> None: ...

class AdmitResponse(_message.Message):
    __slots__ = ("admitted", "hold", "retry_at", "probe_token")
    ADMITTED_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    RETRY_AT_FIELD_NUMBER: _ClassVar[int]
    PROBE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    admitted: bool
    hold: Hold
    retry_at: _timestamp_pb2.Timestamp
    probe_token: str
    def __init__(self, admitted: _Optional[bool] = ..., hold: _Optional[_Union[Hold, _Mapping]] = ..., retry_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., probe_token: _Optional[str] = ...) -> None: ...

class ReportOutcomesRequest(_message.Message):
    __slots__ = ("counts", "probe_token", "probe_succeeded")
    COUNTS_FIELD_NUMBER: _ClassVar[int]
    PROBE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    PROBE_SUCCEEDED_FIELD_NUMBER: _ClassVar[int]
    counts: _containers.RepeatedCompositeFieldContainer[OutcomeCount]
    probe_token: str
    probe_succeeded: bool
    def __init__(self, counts: _Optional[_Iterable[_Union[OutcomeCount, _Mapping]]] = ..., probe_token: _Optional[str] = ..., probe_succeeded: _Optional[bool] = ...) -> None: ...

class OutcomeCount(_message.Message):
    __slots__ = ("catalog", "dependency", "tenant", "method", "requests", "successes", "failures")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSES_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    dependency: str
    tenant: str
    method: str
    requests: int
    successes: int
    failures: int
    def __init__(self, catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., tenant: _Optional[str] = ..., method: _Optional[str] = ..., requests: _Optional[int] = ..., successes: _Optional[int] = ..., failures: _Optional[int] = ...) -> None: ...

class ReportOutcomesResponse(_message.Message):
    __slots__ = ("hold", "probe_accepted")
    HOLD_FIELD_NUMBER: _ClassVar[int]
    PROBE_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    hold: Hold
    probe_accepted: bool
    def __init__(self, hold: _Optional[_Union[Hold, _Mapping]] = ..., probe_accepted: _Optional[bool] = ...) -> None: ...

class ListHoldsRequest(_message.Message):
    __slots__ = ("catalog", "dependency", "tenant", "page_size", "page_token")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    dependency: str
    tenant: str
    page_size: int
    page_token: str
    def __init__(self, catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., tenant: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListHoldsResponse(_message.Message):
    __slots__ = ("holds", "next_page_token")
    HOLDS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    holds: _containers.RepeatedCompositeFieldContainer[Hold]
    next_page_token: str
    def __init__(self, holds: _Optional[_Iterable[_Union[Hold, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ReleaseHoldRequest(_message.Message):
    __slots__ = ("id",)
    ID_FIELD_NUMBER: _ClassVar[int]
    id: str
    def __init__(self, id: _Optional[str] = ...) -> None: ...

class ReleaseHoldResponse(_message.Message):
    __slots__ = ("hold",)
    HOLD_FIELD_NUMBER: _ClassVar[int]
    hold: Hold
    def __init__(self, hold: _Optional[_Union[Hold, _Mapping]] = ...) -> None: ...

class WatchHoldsRequest(_message.Message):
    __slots__ = ("catalog", "dependency", "tenant", "dependencies", "tenants", "resume_digests")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCIES_FIELD_NUMBER: _ClassVar[int]
    TENANTS_FIELD_NUMBER: _ClassVar[int]
    RESUME_DIGESTS_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    dependency: str
    tenant: str
    dependencies: _containers.RepeatedScalarFieldContainer[str]
    tenants: _containers.RepeatedScalarFieldContainer[str]
    resume_digests: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., tenant: _Optional[str] = ..., dependencies: _Optional[_Iterable[str]] = ..., tenants: _Optional[_Iterable[str]] = ..., resume_digests: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchHoldsResponse(_message.Message):
    __slots__ = ("kind", "hold", "server_time", "resumed", "resent_buckets")
    KIND_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIME_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    RESENT_BUCKETS_FIELD_NUMBER: _ClassVar[int]
    kind: HoldEventKind
    hold: Hold
    server_time: _timestamp_pb2.Timestamp
    resumed: bool
    resent_buckets: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, kind: _Optional[_Union[HoldEventKind, str]] = ..., hold: _Optional[_Union[Hold, _Mapping]] = ..., server_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., resumed: _Optional[bool] = ..., resent_buckets: _Optional[_Iterable[int]] = ...) -> None: ...

class Hold(_message.Message):
    __slots__ = ("id", "catalog", "dependency", "tenant", "method", "scope", "kind", "since", "until", "code", "rule", "reason", "probing", "next_probe_at")
    ID_FIELD_NUMBER: _ClassVar[int]
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SINCE_FIELD_NUMBER: _ClassVar[int]
    UNTIL_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    PROBING_FIELD_NUMBER: _ClassVar[int]
    NEXT_PROBE_AT_FIELD_NUMBER: _ClassVar[int]
    id: str
    catalog: str
    dependency: str
    tenant: str
    method: str
    scope: Scope
    kind: HoldKind
    since: _timestamp_pb2.Timestamp
    until: _timestamp_pb2.Timestamp
    code: str
    rule: str
    reason: str
    probing: bool
    next_probe_at: _timestamp_pb2.Timestamp
    def __init__(self, id: _Optional[str] = ..., catalog: _Optional[str] = ..., dependency: _Optional[str] = ..., tenant: _Optional[str] = ..., method: _Optional[str] = ..., scope: _Optional[_Union[Scope, str]] = ..., kind: _Optional[_Union[HoldKind, str]] = ..., since: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., until: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., code: _Optional[str] = ..., rule: _Optional[str] = ..., reason: _Optional[str] = ..., probing: _Optional[bool] = ..., next_probe_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ClassifyRequest(_message.Message):
    __slots__ = ("failure", "locale")
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    failure: Failure
    locale: str
    def __init__(self, failure: _Optional[_Union[Failure, _Mapping]] = ..., locale: _Optional[str] = ...) -> None: ...

class ClassifyResponse(_message.Message):
    __slots__ = ("decision",)
    DECISION_FIELD_NUMBER: _ClassVar[int]
    decision: Decision
    def __init__(self, decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class ClassifyBatchRequest(_message.Message):
    __slots__ = ("failures", "locale")
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    failures: _containers.RepeatedCompositeFieldContainer[Failure]
    locale: str
    def __init__(self, failures: _Optional[_Iterable[_Union[Failure, _Mapping]]] = ..., locale: _Optional[str] = ...) -> None: ...

class ClassifyBatchResponse(_message.Message):
    __slots__ = ("results", "summary")
    RESULTS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    results: _containers.RepeatedCompositeFieldContainer[BatchResult]
    summary: BatchSummary
    def __init__(self, results: _Optional[_Iterable[_Union[BatchResult, _Mapping]]] = ..., summary: _Optional[_Union[BatchSummary, _Mapping]] = ...) -> None: ...

class BatchResult(_message.Message):
    __slots__ = ("index", "decision", "error")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    index: int
    decision: Decision
    error: _status_pb2.Status
    def __init__(self, index: _Optional[int] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., error: _Optional[_Union[_status_pb2.Status, _Mapping]] = ...) -> None: ...

class BatchSummary(_message.Message):
    __slots__ = ("retry_with_limit", "state_verification_required", "fix_before_retry", "do_not_retry", "already_applied", "errors")
    RETRY_WITH_LIMIT_FIELD_NUMBER: _ClassVar[int]
    STATE_VERIFICATION_REQUIRED_FIELD_NUMBER: _ClassVar[int]
    FIX_BEFORE_RETRY_FIELD_NUMBER: _ClassVar[int]
    DO_NOT_RETRY_FIELD_NUMBER: _ClassVar[int]
    ALREADY_APPLIED_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    retry_with_limit: int
    state_verification_required: int
    fix_before_retry: int
    do_not_retry: int
    already_applied: int
    errors: int
    def __init__(self, retry_with_limit: _Optional[int] = ..., state_verification_required: _Optional[int] = ..., fix_before_retry: _Optional[int] = ..., do_not_retry: _Optional[int] = ..., already_applied: _Optional[int] = ..., errors: _Optional[int] = ...) -> None: ...

class ListCatalogsRequest(_message.Message):
    __slots__ = ("locale",)
    LOCALE_FIELD_NUMBER: _ClassVar[int]
    locale: str
    def __init__(self, locale: _Optional[str] = ...) -> None: ...

class ListCatalogsResponse(_message.Message):
    __slots__ = ("catalogs", "policy_version", "default_catalog")
    CATALOGS_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_CATALOG_FIELD_NUMBER: _ClassVar[int]
    catalogs: _containers.RepeatedCompositeFieldContainer[Catalog]
    policy_version: str
    default_catalog: str
    def __init__(self, catalogs: _Optional[_Iterable[_Union[Catalog, _Mapping]]] = ..., policy_version: _Optional[str] = ..., default_catalog: _Optional[str] = ...) -> None: ...

class Catalog(_message.Message):
    __slots__ = ("name", "description", "max_attempts", "backoff", "schedule_ms", "codes", "unknown", "no_envelope", "locales", "exhausted_terminal_state", "read_words", "write_words", "max_delay_ms", "quota_reset", "budgets", "extends")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_FIELD_NUMBER: _ClassVar[int]
    SCHEDULE_MS_FIELD_NUMBER: _ClassVar[int]
    CODES_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    NO_ENVELOPE_FIELD_NUMBER: _ClassVar[int]
    LOCALES_FIELD_NUMBER: _ClassVar[int]
    EXHAUSTED_TERMINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    READ_WORDS_FIELD_NUMBER: _ClassVar[int]
    WRITE_WORDS_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    QUOTA_RESET_FIELD_NUMBER: _ClassVar[int]
    BUDGETS_FIELD_NUMBER: _ClassVar[int]
    EXTENDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    max_attempts: int
    backoff: Backoff
    schedule_ms: _containers.RepeatedScalarFieldContainer[int]
    codes: _containers.RepeatedCompositeFieldContainer[CatalogCode]
    unknown: CatalogCode
    no_envelope: CatalogCode
    locales: _containers.RepeatedScalarFieldContainer[str]
    exhausted_terminal_state: str
    read_words: _containers.RepeatedScalarFieldContainer[str]
    write_words: _containers.RepeatedScalarFieldContainer[str]
    max_delay_ms: int
    quota_reset: str
    budgets: _containers.RepeatedCompositeFieldContainer[CatalogBudget]
    extends: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., max_attempts: _Optional[int] = ..., backoff: _Optional[_Union[Backoff, _Mapping]] = ..., schedule_ms: _Optional[_Iterable[int]] = ..., codes: _Optional[_Iterable[_Union[CatalogCode, _Mapping]]] = ..., unknown: _Optional[_Union[CatalogCode, _Mapping]] = ..., no_envelope: _Optional[_Union[CatalogCode, _Mapping]] = ..., locales: _Optional[_Iterable[str]] = ..., exhausted_terminal_state: _Optional[str] = ..., read_words: _Optional[_Iterable[str]] = ..., write_words: _Optional[_Iterable[str]] = ..., max_delay_ms: _Optional[int] = ..., quota_reset: _Optional[str] = ..., budgets: _Optional[_Iterable[_Union[CatalogBudget, _Mapping]]] = ..., extends: _Optional[str] = ...) -> None: ...

class Backoff(_message.Message):
    __slots__ = ("base_ms", "multiplier", "cap_ms")
    BASE_MS_FIELD_NUMBER: _ClassVar[int]
    MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    CAP_MS_FIELD_NUMBER: _ClassVar[int]
    base_ms: int
    multiplier: float
    cap_ms: int
    def __init__(self, base_ms: _Optional[int] = ..., multiplier: _Optional[float] = ..., cap_ms: _Optional[int] = ...) -> None: ...

class CatalogCode(_message.Message):
    __slots__ = ("code", "aliases", "target_reached", "read_verdict", "write_verdict", "delay", "condition", "retried_write_verdict", "write_with_retry_after_verdict", "read", "write", "retried_write", "write_with_retry_after", "max_delay_ms", "origin")
    CODE_FIELD_NUMBER: _ClassVar[int]
    ALIASES_FIELD_NUMBER: _ClassVar[int]
    TARGET_REACHED_FIELD_NUMBER: _ClassVar[int]
    READ_VERDICT_FIELD_NUMBER: _ClassVar[int]
    WRITE_VERDICT_FIELD_NUMBER: _ClassVar[int]
    DELAY_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    RETRIED_WRITE_VERDICT_FIELD_NUMBER: _ClassVar[int]
    WRITE_WITH_RETRY_AFTER_VERDICT_FIELD_NUMBER: _ClassVar[int]
    READ_FIELD_NUMBER: _ClassVar[int]
    WRITE_FIELD_NUMBER: _ClassVar[int]
    RETRIED_WRITE_FIELD_NUMBER: _ClassVar[int]
    WRITE_WITH_RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    MAX_DELAY_MS_FIELD_NUMBER: _ClassVar[int]
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    code: str
    aliases: _containers.RepeatedScalarFieldContainer[str]
    target_reached: TargetReached
    read_verdict: Verdict
    write_verdict: Verdict
    delay: str
    condition: str
    retried_write_verdict: Verdict
    write_with_retry_after_verdict: Verdict
    read: CatalogRule
    write: CatalogRule
    retried_write: CatalogRule
    write_with_retry_after: CatalogRule
    max_delay_ms: int
    origin: str
    def __init__(self, code: _Optional[str] = ..., aliases: _Optional[_Iterable[str]] = ..., target_reached: _Optional[_Union[TargetReached, str]] = ..., read_verdict: _Optional[_Union[Verdict, str]] = ..., write_verdict: _Optional[_Union[Verdict, str]] = ..., delay: _Optional[str] = ..., condition: _Optional[str] = ..., retried_write_verdict: _Optional[_Union[Verdict, str]] = ..., write_with_retry_after_verdict: _Optional[_Union[Verdict, str]] = ..., read: _Optional[_Union[CatalogRule, _Mapping]] = ..., write: _Optional[_Union[CatalogRule, _Mapping]] = ..., retried_write: _Optional[_Union[CatalogRule, _Mapping]] = ..., write_with_retry_after: _Optional[_Union[CatalogRule, _Mapping]] = ..., max_delay_ms: _Optional[int] = ..., origin: _Optional[str] = ...) -> None: ...

class CatalogRule(_message.Message):
    __slots__ = ("rule", "verdict", "side_effect_state", "required_transition", "reconciliation_action", "scope", "reconcile_before_retry", "reason", "hold_kind", "hold_scope", "hold_ms", "probe_every_ms")
    RULE_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_STATE_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_TRANSITION_FIELD_NUMBER: _ClassVar[int]
    RECONCILIATION_ACTION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    RECONCILE_BEFORE_RETRY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    HOLD_KIND_FIELD_NUMBER: _ClassVar[int]
    HOLD_SCOPE_FIELD_NUMBER: _ClassVar[int]
    HOLD_MS_FIELD_NUMBER: _ClassVar[int]
    PROBE_EVERY_MS_FIELD_NUMBER: _ClassVar[int]
    rule: str
    verdict: Verdict
    side_effect_state: SideEffectState
    required_transition: str
    reconciliation_action: str
    scope: Scope
    reconcile_before_retry: bool
    reason: str
    hold_kind: HoldKind
    hold_scope: Scope
    hold_ms: int
    probe_every_ms: int
    def __init__(self, rule: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., side_effect_state: _Optional[_Union[SideEffectState, str]] = ..., required_transition: _Optional[str] = ..., reconciliation_action: _Optional[str] = ..., scope: _Optional[_Union[Scope, str]] = ..., reconcile_before_retry: _Optional[bool] = ..., reason: _Optional[str] = ..., hold_kind: _Optional[_Union[HoldKind, str]] = ..., hold_scope: _Optional[_Union[Scope, str]] = ..., hold_ms: _Optional[int] = ..., probe_every_ms: _Optional[int] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("catalog", "code", "operation", "method", "attempt", "max_attempts", "retry_after", "retry_after_ms", "deadline", "idempotency_key", "idempotency_key_enforced", "read_back", "cannot_verify_effect", "request_id", "tenant", "upstream", "dependency", "quota_resets_at", "probe_token")
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_ENFORCED_FIELD_NUMBER: _ClassVar[int]
    READ_BACK_FIELD_NUMBER: _ClassVar[int]
    CANNOT_VERIFY_EFFECT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TENANT_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FIELD_NUMBER: _ClassVar[int]
    DEPENDENCY_FIELD_NUMBER: _ClassVar[int]
    QUOTA_RESETS_AT_FIELD_NUMBER: _ClassVar[int]
    PROBE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    catalog: str
    code: str
    operation: OperationKind
    method: str
    attempt: int
    max_attempts: int
    retry_after: str
    retry_after_ms: int
    deadline: _timestamp_pb2.Timestamp
    idempotency_key: str
    idempotency_key_enforced: bool
    read_back: ReadBack
    cannot_verify_effect: bool
    request_id: str
    tenant: str
    upstream: RetryContract
    dependency: str
    quota_resets_at: _timestamp_pb2.Timestamp
    probe_token: str
    def __init__(self, catalog: _Optional[str] = ..., code: _Optional[str] = ..., operation: _Optional[_Union[OperationKind, str]] = ..., method: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., retry_after: _Optional[str] = ..., retry_after_ms: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., idempotency_key_enforced: _Optional[bool] = ..., read_back: _Optional[_Union[ReadBack, str]] = ..., cannot_verify_effect: _Optional[bool] = ..., request_id: _Optional[str] = ..., tenant: _Optional[str] = ..., upstream: _Optional[_Union[RetryContract, _Mapping]] = ..., dependency: _Optional[str] = ..., quota_resets_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., probe_token: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("verdict", "retry", "target_reached", "catalog", "code", "known_code", "operation", "operation_inferred", "reason", "rule", "policy_version", "required_transition", "scope", "request_id", "terminal_state", "warnings", "hold", "budget")
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    TARGET_REACHED_FIELD_NUMBER: _ClassVar[int]
    CATALOG_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    KNOWN_CODE_FIELD_NUMBER: _ClassVar[int]
    OPERATION_FIELD_NUMBER: _ClassVar[int]
    OPERATION_INFERRED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    POLICY_VERSION_FIELD_NUMBER: _ClassVar[int]
    REQUIRED_TRANSITION_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_STATE_FIELD_NUMBER: _ClassVar[int]
    WARNINGS_FIELD_NUMBER: _ClassVar[int]
    HOLD_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    verdict: Verdict
    retry: RetryContract
    target_reached: TargetReached
    catalog: str
    code: str
    known_code: bool
    operation: OperationKind
    operation_inferred: bool
    reason: str
    rule: str
    policy_version: str
    required_transition: str
    scope: Scope
    request_id: str
    terminal_state: str
    warnings: _containers.RepeatedScalarFieldContainer[str]
    hold: Hold
    budget: RetryBudget
    def __init__(self, verdict: _Optional[_Union[Verdict, str]] = ..., retry: _Optional[_Union[RetryContract, _Mapping]] = ..., target_reached: _Optional[_Union[TargetReached, str]] = ..., catalog: _Optional[str] = ..., code: _Optional[str] = ..., known_code: _Optional[bool] = ..., operation: _Optional[_Union[OperationKind, str]] = ..., operation_inferred: _Optional[bool] = ..., reason: _Optional[str] = ..., rule: _Optional[str] = ..., policy_version: _Optional[str] = ..., required_transition: _Optional[str] = ..., scope: _Optional[_Union[Scope, str]] = ..., request_id: _Optional[str] = ..., terminal_state: _Optional[str] = ..., warnings: _Optional[_Iterable[str]] = ..., hold: _Optional[_Union[Hold, _Mapping]] = ..., budget: _Optional[_Union[RetryBudget, _Mapping]] = ...) -> None: ...

class RetryContract(_message.Message):
    __slots__ = ("retryable", "safe", "after_ms", "max_after_ms", "strategy", "attempt", "max_attempts", "deadline", "idempotency_key", "side_effect_state", "reconciliation_action")
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    SAFE_FIELD_NUMBER: _ClassVar[int]
    AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    MAX_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    STRATEGY_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SIDE_EFFECT_STATE_FIELD_NUMBER: _ClassVar[int]
    RECONCILIATION_ACTION_FIELD_NUMBER: _ClassVar[int]
    retryable: bool
    safe: bool
    after_ms: int
    max_after_ms: int
    strategy: Strategy
    attempt: int
    max_attempts: int
    deadline: _timestamp_pb2.Timestamp
    idempotency_key: str
    side_effect_state: SideEffectState
    reconciliation_action: str
    def __init__(self, retryable: _Optional[bool] = ..., safe: _Optional[bool] = ..., after_ms: _Optional[int] = ..., max_after_ms: _Optional[int] = ..., strategy: _Optional[_Union[Strategy, str]] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., deadline: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., idempotency_key: _Optional[str] = ..., side_effect_state: _Optional[_Union[SideEffectState, str]] = ..., reconciliation_action: _Optional[str] = ...) -> None: ...
