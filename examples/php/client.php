<?php
// retryd from PHP with nothing but the curl extension (php-curl): no gRPC
// extension, no Composer. Decides a failed Bitrix24 call over retryd's
// HTTP/JSON door and acts on the ASC contract as seed 002's consumer does.
//
//   php examples/php/client.php [http://127.0.0.1:50051]
//
// Exits 0 when every answer is what the catalogs say, 1 otherwise.

declare(strict_types=1);

$base = rtrim($argv[1] ?? 'http://127.0.0.1:50051', '/');
if (!str_contains($base, '://')) {
    $base = "http://$base";
}

/** POSTs $body as JSON to $path; returns [HTTP status, decoded answer]. */
function retryd_post(string $base, string $path, array $body): array
{
    $ch = curl_init($base . $path);
    curl_setopt_array($ch, [
        CURLOPT_POST => true,
        CURLOPT_POSTFIELDS => json_encode($body, JSON_THROW_ON_ERROR),
        CURLOPT_HTTPHEADER => ['Content-Type: application/json'],
        CURLOPT_RETURNTRANSFER => true,
        CURLOPT_CONNECTTIMEOUT => 2,
        CURLOPT_TIMEOUT => 5,
    ]);
    $raw = curl_exec($ch);
    if ($raw === false) {
        throw new RuntimeException('retryd: ' . curl_error($ch));
    }
    $status = curl_getinfo($ch, CURLINFO_RESPONSE_CODE);
    curl_close($ch);
    return [$status, json_decode($raw, true, 64, JSON_THROW_ON_ERROR)];
}

/** Seed 002's consumer algorithm. */
function should_retry(string $name, array $retry, bool $idempotent, bool $attemptsRemaining): bool
{
    if (!$attemptsRemaining || $name === 'RESULT_STATE_UNKNOWN') {
        return false;
    }
    return $retry['retryable'] && $retry['safe'] && ($idempotent || $retry['idempotency_key'] !== null);
}

$failures = 0;
function expect(bool $ok, string $what): void
{
    global $failures;
    echo ($ok ? 'ok   ' : 'FAIL ') . $what . PHP_EOL;
    if (!$ok) {
        $failures++;
    }
}

// 1. crm.deal.add timed out on Bitrix24: the write may have happened.
[$status, $answer] = retryd_post($base, '/v1/classify', ['failure' => [
    'catalog' => 'vibecode', 'code' => 'BITRIX_TIMEOUT', 'operation' => 'write',
    'method' => 'crm.deal.add', 'attempt' => 1,
]]);
$d = $answer['decision'];
expect($status === 200, "classify answered 200 ($status)");
expect($d['verdict'] === 'state_verification_required', "BITRIX_TIMEOUT on a write: {$d['verdict']}");
expect($d['retry']['reconciliation_action'] === 'read_back_by_business_key', 'read back before a retry');
expect(!should_retry($d['code'], $d['retry'], false, true), 'seed 002: do not resend blindly');

// 2. The queue is full on a read, with a Retry-After: wait, then retry.
[$status, $asc] = retryd_post($base, '/v1/classify?format=asc', ['failure' => [
    'code' => 'QUEUE_OVERFLOW', 'operation' => 'read', 'retry_after' => '5', 'attempt' => 1,
]]);
$r = $asc['retry'];
expect($status === 200 && $r['after_ms'] >= 5000, "QUEUE_OVERFLOW read: wait {$r['after_ms']} ms");
expect(should_retry('QUEUE_OVERFLOW', $r, true, $r['attempt'] < $r['max_attempts']), 'seed 002: retry after the wait');

// 3. A typo is named, field by field (google.rpc.Status).
[$status, $error] = retryd_post($base, '/v1/classify', ['failure' => ['operation' => 'wrte']]);
$field = $error['details'][0]['fieldViolations'][0]['field'] ?? '';
expect($status === 400 && $field === 'failure.operation', "bad operation word: $status naming $field");

// 4. Fleet memory: ask before a first attempt, report the outcomes that fed
// the retry budget (as a batch job would at the end of each run).
[$status, $admit] = retryd_post($base, '/v1/admit', [
    'catalog' => 'frontspin', 'dependency' => 'php-demo', 'tenant' => 'acme', 'attempt' => 1,
]);
expect($status === 200 && $admit['admitted'] === true, 'admitted: no hold covers acme');
[$status, $reported] = retryd_post($base, '/v1/outcomes', ['counts' => [
    ['catalog' => 'frontspin', 'dependency' => 'php-demo', 'tenant' => 'acme', 'requests' => 25],
]]);
expect($status === 200 && $reported['probe_accepted'] === false, 'outcomes reported (no probe token)');

// 5. What would retryd answer for a quota stop? Read-only: nothing is placed.
[$status, $explained] = retryd_post($base, '/v1/classify:explain', ['failure' => [
    'catalog' => 'frontspin', 'code' => 'RATE_LIMITED', 'operation' => 'write',
    'dependency' => 'php-demo', 'tenant' => 'acme',
]]);
expect($status === 200 && ($explained['would_place']['kind'] ?? '') === 'quota_stop', 'explain: a quota stop would be placed');
[$status, $admit] = retryd_post($base, '/v1/admit', [
    'catalog' => 'frontspin', 'dependency' => 'php-demo', 'tenant' => 'acme', 'attempt' => 1,
]);
expect($status === 200 && $admit['admitted'] === true, 'still admitted: explain placed nothing');

exit($failures === 0 ? 0 : 1);
